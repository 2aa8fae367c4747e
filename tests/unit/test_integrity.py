"""The hash chain's byte encoding is exactly the documented one (a third party's
recomputation must agree), and it tells records apart."""

from __future__ import annotations

import hashlib
import struct
import uuid

import pytest

from session_ledger.domain.integrity import GENESIS, chain, chain_hashes, chain_step

SID = uuid.UUID("42d02ed2-ffce-51d4-95d5-03d167eca371")
TOPIC = "t:A.B"
STATE = b'{"a":1}'
# Known vectors: computed once, fixed forever (a change here breaks every stored chain).
H1 = "6a9b384e3401bc2759935d5079b061647d96157652d083942f71e0cdca096e4d"
H2 = "6a5da34cd018cc87b49d0e78a6538d488ae1fab4e11ee53927e890594ed0f1bb"


def test_known_vector() -> None:
    assert GENESIS.hex() == "00" * 32
    assert chain_step(GENESIS, SID, 1, TOPIC, STATE).hex() == H1
    assert chain(SID, [(1, TOPIC, STATE), (2, "t:A.C", b"")]).hex() == H2


def test_the_documented_encoding_by_hand() -> None:
    """What the README tells a third party to compute, written out independently."""
    topic = TOPIC.encode()
    data = (
        bytes(32) + SID.bytes + (1).to_bytes(8, "big") + len(topic).to_bytes(4, "big") + topic
        + len(STATE).to_bytes(8, "big") + STATE
    )  # fmt: skip
    assert hashlib.sha256(data).hexdigest() == H1
    assert struct.pack(">Q", 1) == (1).to_bytes(8, "big")


def test_every_field_and_boundary_changes_the_hash() -> None:
    base = chain_step(GENESIS, SID, 1, TOPIC, STATE)
    variants = [
        chain_step(b"\x01" * 32, SID, 1, TOPIC, STATE),
        chain_step(GENESIS, uuid.UUID(int=SID.int ^ 1), 1, TOPIC, STATE),
        chain_step(GENESIS, SID, 2, TOPIC, STATE),
        chain_step(GENESIS, SID, 1, TOPIC + "x", STATE),
        chain_step(GENESIS, SID, 1, TOPIC, STATE + b" "),
        # The same bytes split differently between topic and state: the length prefixes
        # keep them apart.
        chain_step(GENESIS, SID, 1, TOPIC + "{", STATE[1:]),
    ]
    assert len({base, *variants}) == len(variants) + 1


def test_chain_hashes_yields_each_step_and_refuses_gaps() -> None:
    records = [(1, TOPIC, STATE), (2, "t:A.C", b"")]
    hashes = list(chain_hashes(SID, records))
    assert [h.hex() for h in hashes] == [H1, H2]
    assert chain(SID, records[1:], previous=hashes[0]).hex() == H2  # resumes from h_1
    assert chain(SID, []) == GENESIS
    with pytest.raises(ValueError, match="version 1 was due"):
        chain(SID, [(2, TOPIC, STATE)])
    with pytest.raises(ValueError, match="version 2 was due"):
        chain(SID, [(1, TOPIC, STATE), (3, TOPIC, STATE)])


def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ValueError, match="32 bytes"):
        chain_step(b"short", SID, 1, TOPIC, STATE)
    with pytest.raises(ValueError, match="version"):
        chain_step(GENESIS, SID, -1, TOPIC, STATE)
