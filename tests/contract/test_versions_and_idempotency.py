"""Optimistic concurrency (expected_version) and idempotent retries, on every store."""

from __future__ import annotations

import pytest

from session_ledger.domain.errors import IdempotencyKeyReused, VersionConflict
from session_ledger.domain.ledger import Ledger

M = {"role": "user", "content": "m"}


def test_expected_version_zero_creates_only_a_new_session(ledger: Ledger) -> None:
    assert ledger.put("s", M, expected_version=0).version == 2
    with pytest.raises(VersionConflict) as caught:
        ledger.put("s", M, expected_version=0)
    assert (caught.value.expected, caught.value.actual) == (0, 2)
    assert "is at version 2, not the expected version 0" in str(caught.value)
    assert ledger.head("s").message_count == 1


def test_stale_expected_version_writes_nothing(ledger: Ledger) -> None:
    ledger.put("s", M)
    assert ledger.put("s", M, expected_version=2).version == 3
    for write in (
        lambda: ledger.put("s", M, expected_version=2),
        lambda: ledger.set("s", [], expected_version=2),
        lambda: ledger.reset("s", expected_version=2),
        lambda: ledger.delete_message("s", 0, expected_version=2),
        lambda: ledger.archive_oldest("s", 1, expected_version=2),
        lambda: ledger.put("s", M, expected_version=99),
    ):
        with pytest.raises(VersionConflict):
            write()
    head = ledger.head("s")
    assert (head.version, head.message_count) == (3, 2)


def test_a_retried_write_is_stored_once(ledger: Ledger) -> None:
    first = ledger.put_messages("s", [M, M], idempotency_key="req-1")
    ledger.put("s", M)
    again = ledger.put_messages("s", [M, M], idempotency_key="req-1")
    assert again.replayed and not first.replayed
    assert (again.version, again.message_count) == (first.version, first.message_count)
    assert ledger.head("s").message_count == 3


def test_idempotency_key_on_the_first_write_of_a_session(ledger: Ledger) -> None:
    first = ledger.set("s", [M], idempotency_key="create")
    assert ledger.set("s", [M], idempotency_key="create") == type(first)(
        first.version, first.message_count, replayed=True
    )
    assert ledger.head("s").version == 2


def test_idempotency_key_reused_for_another_payload(ledger: Ledger) -> None:
    ledger.put("s", M, idempotency_key="k")
    with pytest.raises(IdempotencyKeyReused, match="used for a different write"):
        ledger.put("s", {"role": "user", "content": "other"}, idempotency_key="k")
    with pytest.raises(IdempotencyKeyReused):
        ledger.reset("s", idempotency_key="k")
    assert ledger.head("s").message_count == 1


def test_idempotency_keys_are_per_session(ledger: Ledger) -> None:
    ledger.put("a", M, idempotency_key="k")
    assert not ledger.put("b", M, idempotency_key="k").replayed


def test_idempotent_removal_removes_once(ledger: Ledger) -> None:
    ledger.put_messages("s", [M, M, M])
    ledger.delete_last_message("s", idempotency_key="del")
    assert ledger.delete_last_message("s", idempotency_key="del").replayed
    assert ledger.head("s").message_count == 2


def test_versions_without_expectation_always_advance(ledger: Ledger) -> None:
    versions = [ledger.put("s", M).version for _ in range(5)]
    assert versions == [2, 3, 4, 5, 6]


def test_a_retried_removal_answers_the_message_it_removed(ledger: Ledger) -> None:
    ledger.put_messages("s", [{"role": "user", "content": f"m{i}"} for i in range(3)])
    first = ledger.delete_message("s", 0, idempotency_key="del")
    again = ledger.delete_message("s", 0, idempotency_key="del")
    assert [m.content for m in first.removed] == ["m0"] and not first.replayed
    assert again == type(first)(first.version, first.message_count, True, first.removed)
    assert [m.content for m in ledger.get_all("s")] == ["m1", "m2"]
