"""Signed checkpoints: a tenant's session heads at a moment, in a Merkle tree whose root
an Ed25519 key signs, kept as files outside the database.

A checkpoint file is one JSON document:

    {"format": "session-ledger-checkpoint", "format_version": 2,
     "tree_head": {"tenant", "created_at", "tree_size", "root", "previous", "key_id",
                   "leaf": "sha256-v1", "access_log": {"entries", "head"}},
     "signature": base64 of the Ed25519 signature of `signed_bytes(tree_head)`,
     "sessions": [[key, version, head hex], ...]}        (in key order)

`root` is the RFC 9162 root (domain/merkle.py) over the leaves of `sessions`, each leaf
the session id (derived from tenant and key), version and chain head; `previous` is the
`checkpoint_hash` of the tenant's checkpoint before this one (null for the first), so the
files form a chain and a removed one shows; `key_id` is the SHA-256 of the raw public key;
`access_log` is the tenant's access log (projections/access_log.py) as it stood: its
number of entries and the hash of the last, so a log cut short or rewritten since shows
too. (Version 1 files, without `access_log`, are still read.)
The signing key is read from a file (LEDGER_SIGNING_KEY_FILE): the database never holds
it, so whoever can write to the database cannot sign a rewritten state.
"""

from __future__ import annotations

import base64
import bisect
import fcntl
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey

from session_ledger.domain import merkle
from session_ledger.domain.errors import CheckpointError
from session_ledger.domain.integrity import GENESIS
from session_ledger.domain.ports import EvidenceStore
from session_ledger.domain.session import session_id as derive_session_id

from . import strict_json

FORMAT = "session-ledger-checkpoint"
FORMAT_VERSION = 2
LEAF = "sha256-v1"  # domain/merkle.leaf_data over domain/integrity's chain
DOCUMENT_FIELDS = frozenset({"format", "format_version", "tree_head", "signature", "sessions"})
TREE_HEAD_FIELDS_V1 = frozenset(
    {"tenant", "created_at", "tree_size", "root", "previous", "key_id", "leaf"}
)
TREE_HEAD_FIELDS = TREE_HEAD_FIELDS_V1 | {"access_log"}
HEADS_PAGE = 5000  # sessions read per statement while making a checkpoint


@dataclass(frozen=True)
class Checkpoint:
    tree_head: dict[str, Any]
    signature: bytes
    sessions: list[tuple[str, int, bytes]]  # (key, version, chain head), in key order

    @property
    def tenant(self) -> str:
        return str(self.tree_head["tenant"])

    @property
    def access_log(self) -> tuple[int, bytes] | None:
        """(entries, hash of the last) of the access log the tree head signs; None in a
        version 1 checkpoint."""
        signed = self.tree_head.get("access_log")
        return None if signed is None else (signed["entries"], bytes.fromhex(signed["head"]))

    @property
    def hash(self) -> str:
        return checkpoint_hash(self.tree_head)

    def leaves(self) -> list[bytes]:
        return [
            merkle.leaf_hash(merkle.leaf_data(derive_session_id(self.tenant, key), version, head))
            for key, version, head in self.sessions
        ]

    def document(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "format_version": 1 if self.access_log is None else FORMAT_VERSION,
            "tree_head": self.tree_head,
            "signature": base64.b64encode(self.signature).decode("ascii"),
            "sessions": [[key, version, head.hex()] for key, version, head in self.sessions],
        }  # fmt: skip

    def to_bytes(self) -> bytes:
        return json.dumps(self.document(), ensure_ascii=False, separators=(",", ":")).encode()


def signed_bytes(tree_head: dict[str, Any]) -> bytes:
    """What the signature covers: the tree head as canonical JSON (sorted keys, compact)."""
    return json.dumps(tree_head, sort_keys=True, ensure_ascii=False, separators=(",", ":")).encode()


def checkpoint_hash(tree_head: dict[str, Any]) -> str:
    """A checkpoint's name in the next one's `previous`: SHA-256 of its signed bytes."""
    return hashlib.sha256(signed_bytes(tree_head)).hexdigest()


def key_id(public_key: Ed25519PublicKey) -> str:
    raw = public_key.public_bytes(serialization.Encoding.Raw, serialization.PublicFormat.Raw)
    return hashlib.sha256(raw).hexdigest()


# -- keys ----------------------------------------------------------------------------------


def generate_keys(private_file: Path, public_file: Path) -> str:
    """A new Ed25519 key pair as PEM files (the private one readable by its owner only);
    its key id."""
    private = Ed25519PrivateKey.generate()
    pem = private.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                serialization.NoEncryption())  # fmt: skip
    descriptor = os.open(private_file, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(descriptor, "wb") as out:
        out.write(pem)
    public = private.public_key()
    public_file.write_bytes(
        public.public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return key_id(public)


def load_private_key(path: Path) -> Ed25519PrivateKey:
    try:
        key = serialization.load_pem_private_key(path.read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as e:
        raise CheckpointError(f"cannot read the signing key {str(path)!r}: {e}") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise CheckpointError(f"{str(path)!r} is not an Ed25519 private key")
    return key


def load_public_key(path: Path) -> Ed25519PublicKey:
    try:
        key = serialization.load_pem_public_key(path.read_bytes())
    except (OSError, ValueError, TypeError) as e:
        raise CheckpointError(f"cannot read the public key {str(path)!r}: {e}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise CheckpointError(f"{str(path)!r} is not an Ed25519 public key")
    return key


# -- files ---------------------------------------------------------------------------------


def parse_checkpoint(data: bytes) -> Checkpoint:
    """A checkpoint from its file's bytes; CheckpointError if they are not one."""
    try:
        document = strict_json.loads(data)
        if not isinstance(document, dict) or set(document) != DOCUMENT_FIELDS:
            raise ValueError(f"a checkpoint has exactly the fields {sorted(DOCUMENT_FIELDS)}")
        version = document["format_version"]
        if document["format"] != FORMAT or type(version) is not int or version not in (
            1, FORMAT_VERSION,
        ):  # fmt: skip
            raise ValueError(f"not a {FORMAT} version 1 or {FORMAT_VERSION}")
        fields = TREE_HEAD_FIELDS if version == FORMAT_VERSION else TREE_HEAD_FIELDS_V1
        tree_head = document["tree_head"]
        if not isinstance(tree_head, dict) or set(tree_head) != fields:
            raise ValueError(f"a tree head has exactly the fields {sorted(fields)}")
        if version == FORMAT_VERSION:
            _check_access_log(tree_head["access_log"])
        if tree_head["leaf"] != LEAF or not isinstance(tree_head["tenant"], str):
            raise ValueError(f"the tree head is not of leaf {LEAF!r} or lacks its tenant")
        sessions = [(k, v, _canonical_hex(h)) for k, v, h in document["sessions"]]
        if not all(isinstance(k, str) and type(v) is int and v > 0 for k, v, _ in sessions):
            raise ValueError("a session is not [key, version, head]")
        signature = base64.b64decode(document["signature"], validate=True)
        # Only one spelling of each value is accepted, so no byte of a file can change
        # without changing what it says.
        if base64.b64encode(signature).decode("ascii") != document["signature"]:
            raise ValueError("the signature is not canonical base64")
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise CheckpointError(f"not a readable checkpoint: {e}") from None
    return Checkpoint(tree_head, signature, sessions)


def _check_access_log(signed: object) -> None:
    if not (isinstance(signed, dict) and set(signed) == {"entries", "head"}
            and type(signed["entries"]) is int and signed["entries"] >= 0
            and len(_canonical_hex(signed["head"])) == 32):  # fmt: skip
        raise ValueError("access_log is not {entries, head}")


def _canonical_hex(text: str) -> bytes:
    value = bytes.fromhex(text)
    if value.hex() != text:
        raise ValueError(f"{text!r} is not lower-case hex")
    return value


def read_checkpoint(path: Path) -> Checkpoint:
    try:
        return parse_checkpoint(path.read_bytes())
    except OSError as e:
        raise CheckpointError(f"cannot read {str(path)!r}: {e}") from None


def tenant_directory(directory: Path, tenant: str) -> Path:
    """Each tenant's checkpoints in a folder of their own, named by its percent-encoding."""
    name = quote(tenant, safe="")
    return directory / (name.replace(".", "%2E") if name in (".", "..") else name)


def latest_path(directory: Path, tenant: str) -> Path | None:
    """The tenant's newest checkpoint file (names start with their UTC time)."""
    folder = tenant_directory(directory, tenant)
    files = sorted(folder.glob("*.json")) if folder.is_dir() else []
    return files[-1] if files else None


# -- making one ----------------------------------------------------------------------------


def heads(
    views: EvidenceStore, tenant: str, page: int = HEADS_PAGE
) -> Iterator[tuple[str, int, bytes]]:
    """The tenant's sessions' (key, version, stored chain head), in key order."""
    after: str | None = None
    while rows := views.tenant_heads(tenant, after, page):
        for key, version, head in rows:
            if head is None:
                raise CheckpointError(
                    f"session {key!r} of tenant {tenant!r} has no stored chain head: run "
                    "`session-ledger rebuild` (and `verify`) before the first checkpoint"
                )
            yield key, version, head
        after = rows[-1][0]


def sign(
    tenant: str,
    sessions: list[tuple[str, int, bytes]],
    private_key: Ed25519PrivateKey,
    previous: str | None,
    now: datetime | None = None,
    access_log: tuple[int, bytes] = (0, GENESIS),
) -> Checkpoint:
    """The signed checkpoint of these session heads and this access-log head."""
    leaves = [merkle.leaf_hash(merkle.leaf_data(derive_session_id(tenant, k), v, h))
              for k, v, h in sessions]  # fmt: skip
    tree_head = {
        "tenant": tenant, "created_at": (now or datetime.now(UTC)).astimezone(UTC).isoformat(),
        "tree_size": len(sessions), "root": merkle.root(leaves).hex(), "previous": previous,
        "key_id": key_id(private_key.public_key()), "leaf": LEAF,
        "access_log": {"entries": access_log[0], "head": access_log[1].hex()},
    }  # fmt: skip
    return Checkpoint(tree_head, private_key.sign(signed_bytes(tree_head)), sessions)


def make_checkpoint(
    views: EvidenceStore, tenant: str, private_key: Ed25519PrivateKey, directory: Path
) -> tuple[Path, Checkpoint]:
    """Sign the tenant's current heads and write the checkpoint into `directory`, naming
    the newest one there as `previous`. A lock file keeps two makers from forking the
    chain of files; the file appears whole (written aside, then renamed)."""
    folder = tenant_directory(directory, tenant)
    folder.mkdir(parents=True, exist_ok=True)
    with (folder / ".lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        last = latest_path(directory, tenant)
        previous = read_checkpoint(last).hash if last else None
        checkpoint = sign(tenant, list(heads(views, tenant)), private_key, previous,
                          access_log=views.access_head(tenant))  # fmt: skip
        stamp = datetime.fromisoformat(checkpoint.tree_head["created_at"])
        path = folder / f"{stamp:%Y%m%dT%H%M%S%fZ}-{checkpoint.hash[:16]}.json"
        partial = path.with_suffix(".partial")
        partial.write_bytes(checkpoint.to_bytes())
        partial.replace(path)
    return path, checkpoint


def inclusion_proof(
    directory: Path, tenant: str, key: str, to_version: int
) -> dict[str, Any] | None:
    """What an export carries to prove its session belongs to the tenant's newest signed
    state: that checkpoint's tree head and signature, the session's leaf (version, head)
    and its Merkle path. None when there is no checkpoint, it does not list the session,
    or it recorded a version past the export's last one (the export cannot reach it)."""
    path = latest_path(directory, tenant)
    if path is None:
        return None
    checkpoint = read_checkpoint(path)
    keys = [k for k, _, _ in checkpoint.sessions]
    index = bisect.bisect_left(keys, key)
    if index == len(keys) or keys[index] != key:
        return None
    _, version, head = checkpoint.sessions[index]
    if version > to_version:
        return None
    proof = merkle.inclusion_path(merkle.levels(checkpoint.leaves()), index)
    return {
        "tree_head": checkpoint.tree_head,
        "signature": base64.b64encode(checkpoint.signature).decode("ascii"),
        "leaf_index": index, "version": version, "head": head.hex(),
        "path": [p.hex() for p in proof],
    }  # fmt: skip
