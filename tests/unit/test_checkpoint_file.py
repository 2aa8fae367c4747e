"""A checkpoint file says one thing in one spelling: any byte of it altered is refused
(unreadable, or a signature, key or root that no longer holds)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from session_ledger.domain.errors import CheckpointError
from session_ledger.projections.checkpoint import Checkpoint, parse_checkpoint, sign, signed_bytes
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


def test_a_version_1_checkpoint_without_the_access_log_is_still_read() -> None:
    made = sign("tenant ✓", SESSIONS, KEY, None, access_log=(7, bytes([9]) * 32))
    assert made.access_log == (7, bytes([9]) * 32)
    head = {k: v for k, v in made.tree_head.items() if k != "access_log"}
    old = Checkpoint(head, KEY.sign(signed_bytes(head)), SESSIONS)
    assert b'"format_version":1' in old.to_bytes()
    read = parse_checkpoint(old.to_bytes())
    assert read.access_log is None and check_checkpoint(read, KEY.public_key()) == []
    # a version 2 file must carry it, and a version 1 file must not
    swapped = made.to_bytes().replace(b'"format_version":2', b'"format_version":1')
    assert refused(swapped) and refused(old.to_bytes().replace(b'"format_version":1',
                                                               b'"format_version":2'))  # fmt: skip


def test_a_key_repeated_or_a_version_spelt_otherwise_is_refused() -> None:
    """Readers differ on a repeated key's value, and `true` is not version 1."""
    data = sign("tenant ✓", SESSIONS, KEY, None).to_bytes()
    assert not refused(data)
    repeated = data.replace(b'"format":', b'"format":"other","format":', 1)
    with pytest.raises(CheckpointError, match="'format' is repeated"):
        parse_checkpoint(repeated)
    assert refused(data.replace(b'"format_version":2', b'"format_version":2.0'))
    old = sign("tenant ✓", SESSIONS, KEY, None).to_bytes()
    assert refused(old.replace(b'"format_version":2', b'"format_version":true'))
