"""The offline check of a JSONL export (`projections/export.py` writes it): recomputes
everything from the file alone, line by line, and names the first line that does not
hold. Needs no database and no keys (content sealed at rest is checked for its shape
only: see `_take_sealed`); given the checkpoints' public key, it also checks the
signature of the checkpoint the export carries (then `cryptography` is imported)."""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from eventsourcing.persistence import (
    DatetimeAsISO,
    DecimalAsStr,
    JSONTranscoder,
    UUIDAsHex,
)

from session_ledger.domain import merkle
from session_ledger.domain.integrity import GENESIS, chain_step
from session_ledger.domain.session import session_id as derive_session_id

from . import strict_json
from .access_chain import check_access_line
from .export_format import CHAIN, FORMAT, FORMAT_VERSION, line, readable
from .sealing import SEALED_FIELDS, commitment, erased_value, field_json

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

# The fields of an event line that must equal what its stored state gives.
READABLE = ("type", "recorded_at", "actor", "reason", "idempotency_key", "payload")


@dataclass(frozen=True)
class VerifyReport:
    """What `verify_export` found: intact, or the first line that breaks and why."""

    ok: bool
    lines: int  # lines read
    events: int  # event lines that verified
    chain_head: str | None  # hex h_v after the last verified event
    tenant: str | None = None
    key: str | None = None
    to_version: int | None = None
    broken_line: int | None = None  # 1-based
    problem: str | None = None
    checkpoint: str | None = None  # what the inclusion proof showed, if the file has one
    # Events whose content is sealed at rest and not proven by the file: erased (the
    # content gone), or sealed before commitments (checked by its shape; `_take_sealed`).
    sealed: int = 0

    def summary(self) -> str:
        """One line for people."""
        if self.ok:
            return (
                f"intact: session {self.key!r} of tenant {self.tenant!r}, {self.events} events "
                f"(versions 1 to {self.to_version}), chain head {self.chain_head}"
                + (f"; {self.checkpoint}" if self.checkpoint else "; no checkpoint")
                + (f"; the sealed content of {self.sealed} events is not proven by this "
                   "file (erased, or sealed before commitments: checked by its shape)"
                   if self.sealed else "")
            )  # fmt: skip
        return f"broken at line {self.broken_line}: {self.problem}"


class _Broken(Exception):
    def __init__(self, line: int, problem: str) -> None:
        super().__init__(problem)
        self.line = line
        self.problem = problem


class _Verifier:
    """Checks the lines of an export one at a time (memory stays flat)."""

    def __init__(self, public_key: Ed25519PublicKey | None = None) -> None:
        self.public_key = public_key
        self.proof: dict[str, Any] | None = None
        self.proven: str | None = None  # set once the proof's head is met in the chain
        self.digest = hashlib.sha256()
        self.transcoder = JSONTranscoder()
        for transcoding in (UUIDAsHex(), DecimalAsStr(), DatetimeAsISO()):
            self.transcoder.register(transcoding)
        self.header: dict[str, Any] | None = None
        self.session_id = uuid.UUID(int=0)
        self.head = GENESIS
        self.events = 0
        self.sealed = 0  # events whose readable content `_take_sealed` took
        self.trailer = False
        self.number = 0
        self.access = 0  # access lines read (they follow the events)
        self.access_seq = 0

    def line(self, raw: bytes) -> None:
        self.number += 1
        n = self.number
        data = raw[:-1] if raw.endswith(b"\n") else raw
        if self.trailer:
            raise _Broken(n, "a line after the trailer")
        try:
            record = strict_json.loads(data)
        except (UnicodeDecodeError, json.JSONDecodeError) as e:
            raise _Broken(n, f"not a JSON line ({e}); the file may be cut short") from None
        except strict_json.RepeatedKey as e:
            raise _Broken(n, str(e)) from None
        if not isinstance(record, dict):
            raise _Broken(n, "not a JSON object")
        kind = record.get("record")
        if n == 1:
            self._header(n, record)
        elif kind == "checkpoint" and n == 2:
            self._checkpoint(n, record)
        elif kind == "event" and not self.access:
            self._event(n, record)
        elif kind == "access" and self.header is not None:
            self._access(n, record)
        elif kind == "trailer":
            self._trailer(n, record)
            return
        else:
            raise _Broken(n, f"unknown record {kind!r} (expected an event or the trailer; a "
                             "checkpoint only right after the header)")  # fmt: skip
        self.digest.update(data + b"\n")

    def _header(self, n: int, record: dict[str, Any]) -> None:
        if record.get("record") != "header" or record.get("format") != FORMAT:
            raise _Broken(n, f"not a {FORMAT} header")
        if not _same(record.get("format_version"), FORMAT_VERSION) or record.get("chain") != CHAIN:
            raise _Broken(
                n,
                f"format version {record.get('format_version')!r} / chain "
                f"{record.get('chain')!r}; this verifier reads {FORMAT_VERSION} / {CHAIN}",
            )
        tenant, key, to_version = record.get("tenant"), record.get("key"), record.get("to_version")
        if not isinstance(tenant, str) or not isinstance(key, str):
            raise _Broken(n, "the header lacks the tenant or the key")
        if not isinstance(to_version, int) or isinstance(to_version, bool) or to_version < 1:
            raise _Broken(n, f"to_version must be a positive integer; got {to_version!r}")
        self.session_id = derive_session_id(tenant, key)
        if record.get("session_id") != str(self.session_id):
            raise _Broken(n, f"session_id is not the id of tenant {tenant!r} and key {key!r}")
        self.header = record

    def _event(self, n: int, record: dict[str, Any]) -> None:
        assert self.header is not None
        version, due = record.get("version"), self.events + 1
        if type(version) is not int or version != due:
            raise _Broken(
                n, f"version {version!r} where version {due} was due: a line is missing, "
                "repeated or out of order",
            )  # fmt: skip
        if version > self.header["to_version"]:
            raise _Broken(n, f"version {version} is past the header's to_version")
        topic, encoded = record.get("topic"), record.get("state")
        if not isinstance(topic, str) or not isinstance(encoded, str):
            raise _Broken(n, "the event lacks its topic or state")
        try:
            state = base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            raise _Broken(n, "state is not base64") from None
        if record.get("state_sha256") != hashlib.sha256(state).hexdigest():
            raise _Broken(n, "state_sha256 does not match the state")
        head = chain_step(self.head, self.session_id, version, topic, state)
        if record.get("chain") != head.hex():
            raise _Broken(n, f"the chain breaks: h_{version} is {head.hex()}, the line says "
                             f"{record.get('chain')!r}")  # fmt: skip
        if self.proof is not None and version == self.proof["version"]:
            if head.hex() != self.proof["head"]:
                raise _Broken(n, f"h_{version} is {head.hex()}; the signed checkpoint recorded "
                                 f"{self.proof['head']}: not the signed state")  # fmt: skip
            self.proven = self._proven()
        try:
            fields = self.transcoder.decode(state)
        except (ValueError, TypeError, KeyError) as e:
            raise _Broken(n, f"the stored state does not decode: {e}") from None
        expected = json.loads(line(readable(topic, fields)))
        try:
            self.sealed += _take_sealed(
                expected["payload"], record.get("payload"), record.get("openings")
            )
        except ValueError as e:
            raise _Broken(n, str(e)) from None
        for name in READABLE:
            if not _same(record.get(name), expected[name]):
                raise _Broken(n, f"{name} does not match the stored state")
        self.head, self.events = head, version

    def _access(self, n: int, record: dict[str, Any]) -> None:
        assert self.header is not None
        if self.events != self.header["to_version"]:
            raise _Broken(n, "an access line before the last event")
        header = self.header
        problem = check_access_line(record, header["tenant"], header["key"], self.access_seq,
                                    header.get("access_log_entries"))  # fmt: skip
        if problem is not None:
            raise _Broken(n, problem)
        self.access += 1
        self.access_seq = record["seq"]

    def _trailer(self, n: int, record: dict[str, Any]) -> None:
        assert self.header is not None
        self.trailer = True
        to_version = self.header["to_version"]
        if not _same(record.get("events"), self.events):
            raise _Broken(n, f"the trailer counts {record.get('events')!r} events; the file "
                             f"has {self.events}")  # fmt: skip
        if self.events != to_version:
            raise _Broken(n, f"the file ends at version {self.events}; the header promised "
                             f"versions 1 to {to_version}")  # fmt: skip
        if not _same(record.get("access_entries"),
                     self.access if "access_log_entries" in self.header else None):  # fmt: skip
            raise _Broken(n, f"the trailer counts {record.get('access_entries')!r} access "
                             f"entries; the file has {self.access}")  # fmt: skip
        if record.get("chain_head") != self.head.hex():
            raise _Broken(n, "the trailer's chain_head is not the chain's head")
        if record.get("sha256") != self.digest.hexdigest():
            raise _Broken(n, "the trailer's sha256 does not match the lines before it")
        if self.public_key is not None and self.proof is None:
            raise _Broken(n, "the export carries no checkpoint to check the public key against")

    def _checkpoint(self, n: int, record: dict[str, Any]) -> None:
        """The inclusion proof: the leaf (this session, version, head) and its path lead
        to the signed root; the head itself is checked when the chain reaches it."""
        assert self.header is not None
        head, path = record.get("tree_head"), record.get("path")
        version, index = record.get("version"), record.get("leaf_index")
        try:
            if not (isinstance(head, dict) and isinstance(path, list) and type(version) is int
                    and type(index) is int and type(head["tree_size"]) is int):  # fmt: skip
                raise TypeError
            leaf = merkle.leaf_data(self.session_id, version, bytes.fromhex(record["head"]))
            root = merkle.root_from_path(
                index, head["tree_size"], merkle.leaf_hash(leaf), [bytes.fromhex(p) for p in path]
            )
        except (KeyError, TypeError, ValueError):
            raise _Broken(n, "the checkpoint line does not have the documented shape") from None
        if head.get("tenant") != self.header["tenant"]:
            raise _Broken(n, "the checkpoint is of another tenant")
        if root is None or root.hex() != head.get("root"):
            raise _Broken(n, "the inclusion proof does not lead to the checkpoint's root")
        if not 1 <= version <= self.header["to_version"]:
            raise _Broken(n, f"the checkpoint's version {version} is not in the export")
        if self.public_key is not None:
            from cryptography.exceptions import InvalidSignature

            from .checkpoint import key_id, signed_bytes  # (cryptography, only when asked)

            if head.get("key_id") != key_id(self.public_key):
                raise _Broken(n, "the checkpoint was signed by another key")
            try:
                signature = base64.b64decode(str(record.get("signature")), validate=True)
                self.public_key.verify(signature, signed_bytes(head))
            except (InvalidSignature, ValueError):  # (binascii.Error is a ValueError)
                raise _Broken(n, "the checkpoint's signature does not verify") from None
        self.proof = record

    def _proven(self) -> str:
        assert self.proof is not None
        head = self.proof["tree_head"]
        signed = "signature verified" if self.public_key else "signature not checked (no key)"
        return (f"version {self.proof['version']} is leaf {self.proof['leaf_index']} of the "
                f"{head['tree_size']}-session checkpoint of {head['created_at']} (root "
                f"{head['root']}), {signed}")  # fmt: skip

    def report(self, problem: _Broken | None = None) -> VerifyReport:
        header = self.header or {}
        return VerifyReport(
            ok=problem is None, lines=self.number, events=self.events,
            chain_head=self.head.hex() if self.events else None, tenant=header.get("tenant"),
            key=header.get("key"), to_version=header.get("to_version"),
            broken_line=problem.line if problem else None,
            problem=problem.problem if problem else None, checkpoint=self.proven,
            sealed=self.sealed,
        )  # fmt: skip


def verify_export(
    lines: Iterable[bytes | str], public_key: Ed25519PublicKey | None = None
) -> VerifyReport:
    """Check a JSONL export from its lines alone (a file opened in binary mode, or
    `text.split("\\n")`): header, the chain of every event from its stored record, each
    line's readable fields against its record, the trailer's count, head and digest; and
    the checkpoint's inclusion proof if it has one (its signature given `public_key`,
    which then requires one)."""
    verifier = _Verifier(public_key)
    try:
        for raw in lines:
            data = raw.encode("utf-8") if isinstance(raw, str) else bytes(raw)
            if not data and verifier.trailer:
                continue  # the empty string after the final "\n" of a split
            verifier.line(data)
        if verifier.number == 0:
            raise _Broken(1, "the file is empty")
        if not verifier.trailer:
            raise _Broken(
                verifier.number, "the file ends here without its trailer: it was cut short"
            )
    except _Broken as broken:
        return verifier.report(broken)
    return verifier.report()


def _same(given: object, expected: object) -> bool:
    """Equal as JSON values, not only as Python's: 3, 3.0 and true are three values."""
    if given == expected:  # (then the same unless some number is another type)
        return _canonical(given) == _canonical(expected)
    return False


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _take_sealed(stored: dict[str, Any], given: object, openings: object) -> bool:
    """Where the stored state holds a sealed field (encryption at rest), the file's line
    holds its content opened, which no key-less check can compare with the ciphertext.
    With its salt among the line's `openings`, the content is proven against the field's
    commitment (`c`, which the chain covers): taken if it matches, else ValueError. With
    none, it must read as erased (its key gone); a field sealed before commitments (no
    `c`) is taken when it has the field's shape (as many messages; or one message, or
    none: a stream aborted without its text seals its `null`). Whether any field's
    content is left unproven."""
    unproven = False
    for name in SEALED_FIELDS:
        sealed = stored.get(name)
        if not (isinstance(sealed, dict) and "sealed" in sealed):
            continue
        value = given.get(name) if isinstance(given, dict) else None
        salt = openings.get(name) if isinstance(openings, dict) else None
        if "c" in sealed and salt is not None:
            try:
                proven = commitment(bytes.fromhex(salt), field_json(value)) == sealed["c"]
            except (TypeError, ValueError):  # (a salt that is no hex; a value JSON cannot hold)
                proven = False
            if not proven:
                raise ValueError(f"the payload's {name} does not match its sealed commitment")
            stored[name] = value
            continue
        unproven = True
        if "c" in sealed:
            shaped = value == erased_value(name, sealed)
        else:
            listed = isinstance(value, list) and len(value) == sealed.get("n")
            shaped = listed or ("n" not in sealed and (value is None or isinstance(value, dict)))
        if shaped:
            stored[name] = value
    return unproven
