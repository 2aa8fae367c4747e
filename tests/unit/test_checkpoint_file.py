"""A checkpoint file says one thing in one spelling: any byte of it altered is refused
(unreadable, or a signature, key or root that no longer holds)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from session_ledger.domain.errors import CheckpointError
from session_ledger.projections.checkpoint import parse_checkpoint, sign
from session_ledger.projections.checkpoint_verify import check_checkpoint

KEY = Ed25519PrivateKey.from_private_bytes(bytes(range(32)))
SESSIONS = [("a", 3, bytes([1]) * 32), ("b/c", 12, bytes([2]) * 32), ("d é", 1, bytes([3]) * 32)]


def refused(data: bytes) -> bool:
    try:
        checkpoint = parse_checkpoint(data)
    except CheckpointError:
        return True
    return bool(check_checkpoint(checkpoint, KEY.public_key()))


def test_a_signed_checkpoint_reads_back_and_holds() -> None:
    made = sign("tenant ✓", SESSIONS, KEY, "ab" * 32, datetime(2026, 12, 3, tzinfo=UTC))
    read = parse_checkpoint(made.to_bytes())
    assert read == made and read.hash == made.hash
    assert check_checkpoint(read, KEY.public_key()) == []


@pytest.mark.parametrize("mask", [0x01, 0x20, 0x80])
def test_every_byte_altered_is_refused(mask: int) -> None:
    data = sign("tenant ✓", SESSIONS, KEY, None).to_bytes()
    missed = [i for i in range(len(data))
              if not refused(data[:i] + bytes([data[i] ^ mask]) + data[i + 1 :])]  # fmt: skip
    assert missed == [], [data[i - 10 : i + 10] for i in missed]
