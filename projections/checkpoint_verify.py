"""Checking signed checkpoints with the public key only: each checkpoint on its own
(signature, key, tree), two in turn (every session and the access log only grew), and
the store against them (every chain, the access log's too, recomputes and passes through
every recorded head)."""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Sequence

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey

from session_ledger.domain import merkle
from session_ledger.domain.errors import SessionNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import ChainReport, EvidenceStore

from .access_log import verify_access_log
from .checkpoint import Checkpoint, key_id, signed_bytes

KEYS_PAGE = 1000  # session keys read per statement when looking for sessions made since


def check_checkpoint(checkpoint: Checkpoint, public_key: Ed25519PublicKey) -> list[str]:
    """What is wrong with a checkpoint on its own (empty: nothing): who signed it, whether
    the signature holds, and whether its session list gives the signed root."""
    problems = []
    head = checkpoint.tree_head
    expected = key_id(public_key)
    if head.get("key_id") != expected:
        problems.append(f"signed by another key: key id {head.get('key_id')}, the public key's "
                        f"is {expected}")  # fmt: skip
    try:
        public_key.verify(checkpoint.signature, signed_bytes(head))
    except InvalidSignature:
        problems.append("the signature does not verify: the tree head or the signature was "
                        "altered, or another key signed it")  # fmt: skip
    keys = [key for key, _, _ in checkpoint.sessions]
    if any(a >= b for a, b in itertools.pairwise(keys)):
        problems.append("the sessions are not in strictly increasing key order")
    if head.get("tree_size") != len(keys):
        problems.append(f"the tree head says {head.get('tree_size')!r} sessions; the file "
                        f"lists {len(keys)}")  # fmt: skip
    if head.get("root") != merkle.root(checkpoint.leaves()).hex():
        problems.append("the sessions listed do not give the signed root")
    return problems


def check_growth(earlier: Checkpoint, later: Checkpoint) -> list[str]:
    """Between two checkpoints of a tenant: every session of the earlier one is in the
    later one at the same or a later version, and at the same version with the same head.
    (That a later head extends an earlier one needs the events: `verify_store`.)"""
    if earlier.tenant != later.tenant:
        return [f"the checkpoints are of tenants {earlier.tenant!r} and {later.tenant!r}"]
    if earlier.tree_head["created_at"] > later.tree_head["created_at"]:
        earlier, later = later, earlier
    now = {key: (version, head) for key, version, head in later.sessions}
    problems = []
    for key, version, head in earlier.sessions:
        if key not in now:
            when = earlier.tree_head["created_at"]
            problems.append(
                f"session {key!r}: in the checkpoint of {when}, gone from the later one"
            )
        elif now[key][0] < version:
            problems.append(f"session {key!r}: rolled back from version {version} to "
                            f"{now[key][0]}")  # fmt: skip
        elif now[key][0] == version and now[key][1] != head:
            problems.append(f"session {key!r}: rewritten at version {version}")
    before, after = earlier.access_log, later.access_log
    if before is not None and after is not None:
        if after[0] < before[0]:
            problems.append(f"access log: cut short from {before[0]} entries to {after[0]}")
        elif after[0] == before[0] and after[1] != before[1]:
            problems.append(f"access log: rewritten at entry {before[0]}")
    return problems


def verify_access(views: EvidenceStore, checkpoints: Sequence[Checkpoint]) -> list[str]:
    """The tenant's access log recomputed from its entries: intact, and passing through
    the head each checkpoint signed (none signed by a version 1 checkpoint)."""
    pins: dict[int, bytes] = {}
    problems = []
    for checkpoint in checkpoints:
        signed = checkpoint.access_log
        if signed is not None and pins.setdefault(signed[0], signed[1]) != signed[1]:
            problems.append(f"two checkpoints signed different hashes of access entry {signed[0]}")
    return problems + list(verify_access_log(views, checkpoints[0].tenant, pinned=pins))


def verify_store(ledger: Ledger, checkpoints: Sequence[Checkpoint]) -> Iterator[ChainReport]:
    """Every session of the checkpoints' tenant, recomputed from its stored events: those
    the checkpoints list must pass through each head they recorded (a report per session,
    a missing one included), and those made since must recompute on their own."""
    tenant = checkpoints[0].tenant
    pins: dict[str, dict[int, bytes]] = {}
    for checkpoint in checkpoints:
        for key, version, head in checkpoint.sessions:
            pins.setdefault(key, {})[version] = head
    for key in sorted(pins):
        try:
            yield ledger.verify(key, tenant=tenant, pinned=pins[key])
        except SessionNotFound:
            yield ChainReport(tenant, key, 0, None, 1, "missing from the store: the checkpoint "
                              f"recorded version {max(pins[key])}")  # fmt: skip
    after: str | None = None
    while keys := ledger.keys(tenant=tenant, after=after, limit=KEYS_PAGE):
        for key in keys:
            if key not in pins:
                yield ledger.verify(key, tenant=tenant)
        after = keys[-1]
