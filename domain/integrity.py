"""The per-session hash chain over stored event records: what `verify` recomputes.

Every stored event of a session is a record (session id, version, topic, state bytes);
the chain links each record to all before it, so altering, removing or reordering any
record changes every hash from there on:

    h_0 = 32 zero bytes
    h_v = SHA-256( h_{v-1}                              32 bytes
                || session_id                           16 bytes: the UUID's bytes (RFC 4122
                                                        order, `uuid.UUID.bytes`)
                || version                              8 bytes: unsigned, big-endian
                || len(topic) || topic                  4-byte unsigned big-endian length
                                                        of the UTF-8 topic, then the topic
                || len(state) || state )                8-byte unsigned big-endian length
                                                        of the stored state, then the state
                                                        bytes exactly as stored

The length prefixes make the encoding unambiguous: no two different records encode to
the same bytes. `chain_step` is the whole definition; it takes no keys, so anyone holding
the records (an export file, a copy of the event table) can recompute it.
"""

from __future__ import annotations

import hashlib
import struct
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence

from .ports import ChainReport

GENESIS = bytes(32)  # h_0
HASH_BYTES = 32
MAX_VERSION = 2**64 - 1
MAX_TOPIC_BYTES = 2**32 - 1


def chain_step(
    previous: bytes, session_id: uuid.UUID, version: int, topic: str, state: bytes
) -> bytes:
    """h_v from h_{v-1} (`previous`) and the stored record of version `version`."""
    if len(previous) != HASH_BYTES:
        raise ValueError(f"the previous hash must be {HASH_BYTES} bytes; got {len(previous)}")
    # Part by part, the state uncopied: hashlib lets go of the GIL over a large part, where
    # joining a 28 MiB record first held it (and the event loop) for tens of ms.
    digest = hashlib.sha256(previous)
    for part in _record_parts(session_id, version, topic, state):
        digest.update(part)
    return digest.digest()


def record_bytes(session_id: uuid.UUID, version: int, topic: str, state: bytes) -> bytes:
    """The encoding of one record that follows h_{v-1} in the hash: h_v is
    SHA-256(h_{v-1} || record_bytes(...)). PostgreSQL hashes it in the append itself."""
    return b"".join(_record_parts(session_id, version, topic, state))


def _record_parts(
    session_id: uuid.UUID, version: int, topic: str, state: bytes
) -> tuple[bytes, ...]:
    if not 0 <= version <= MAX_VERSION:
        raise ValueError(f"version must be between 0 and 2**64-1; got {version}")
    encoded_topic = topic.encode("utf-8")
    if len(encoded_topic) > MAX_TOPIC_BYTES:
        raise ValueError("the topic is longer than 2**32-1 bytes")
    return (session_id.bytes, struct.pack(">QI", version, len(encoded_topic)), encoded_topic,
            struct.pack(">Q", len(state)), state)  # fmt: skip


def chain_hashes(
    session_id: uuid.UUID,
    records: Iterable[tuple[int, str, bytes]],
    previous: bytes = GENESIS,
) -> Iterator[bytes]:
    """h_v after each record (version, topic, state), in order.

    Versions must follow each other by one: a gap is a missing record, which a chain must
    not absorb silently (ValueError). From `GENESIS`, the first version must be 1.
    """
    expected = 1 if previous == GENESIS else None
    for version, topic, state in records:
        if expected is not None and version != expected:
            raise ValueError(f"record of version {version} where version {expected} was due")
        previous = chain_step(previous, session_id, version, topic, state)
        expected = version + 1
        yield previous


def chain(
    session_id: uuid.UUID,
    records: Iterable[tuple[int, str, bytes]],
    previous: bytes = GENESIS,
) -> bytes:
    """The chain head after all `records` (version, topic, state); `previous` if none."""
    head = previous
    for step in chain_hashes(session_id, records, previous):
        head = step
    return head


VERIFY_PAGE = 1000  # records (and stored hashes) read per step of `verify_chain`

Records = Callable[[int, int], Sequence[tuple[int, str, bytes]]]
StoredHashes = Callable[[int, int], Sequence[tuple[int, bytes | None]]]


def verify_chain(
    session_id: uuid.UUID,
    tenant: str,
    key: str,
    head_version: int,
    records: Records,
    stored_hashes: StoredHashes,
    pinned: Mapping[int, bytes] | None = None,
) -> ChainReport:
    """Recompute a session's chain from its records and compare it with the hashes stored
    when they were written. `records(after, limit)` and `stored_hashes(after, limit)` read
    a page after a version; the report names the first version that differs.

    `pinned` maps versions to heads kept outside the store (a signed checkpoint's): the
    recomputed chain must pass through each, so a session rewritten with its stored hashes
    recomputed to match, or rolled back to an earlier head, is caught too."""
    pins = pinned or {}
    checked, h = 0, GENESIS
    good = h  # h of the last version that checked out

    def report(
        bad: int | None = None, problem: str | None = None, derivable: bool = False
    ) -> ChainReport:
        head = good.hex() if checked else None
        return ChainReport(tenant, key, checked, head, bad, problem, derivable)

    while True:
        page = records(checked, VERIFY_PAGE)
        stored = dict(stored_hashes(checked, VERIFY_PAGE))
        for version, topic, state in page:
            if version != checked + 1:
                return report(checked + 1, f"the event of version {checked + 1} is missing")
            h = chain_step(h, session_id, version, topic, state)
            if version not in stored:
                return report(version, f"version {version} has no stored hash entry", True)
            kept = stored[version]
            if kept is None:
                return report(version, f"version {version} has no stored hash (derive the "
                                       "views again from the events)", True)  # fmt: skip
            if kept != h:
                return report(version, f"version {version}: the stored hash is {kept.hex()}, "
                                       f"the events give {h.hex()}")  # fmt: skip
            if version in pins and pins[version] != h:
                return report(version, f"rewritten at or before version {version}: the "
                                       f"events give h_{version} = {h.hex()}, the "
                                       f"checkpoint recorded {pins[version].hex()}")  # fmt: skip
            checked, good = version, h
        if len(page) < VERIFY_PAGE:
            break
    if checked < head_version:  # (writes made while verifying may add versions)
        return report(checked + 1, f"the events end at version {checked}; the session "
                                   f"says {head_version}")  # fmt: skip
    if pins and max(pins) > checked:
        return report(checked + 1, f"rolled back: the events end at version {checked}; the "
                                   f"checkpoint recorded version {max(pins)}")  # fmt: skip
    return report()
