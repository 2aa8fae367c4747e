"""A session's head as it stood at a past version or moment, on every store: what a replay
needs to page that version's history from its newest message."""

from __future__ import annotations

import pytest

from session_ledger.domain.errors import InvalidInput, SessionNotFound, StateNotFound
from session_ledger.domain.ledger import Ledger


def test_head_at_each_version_has_that_versions_counts(ledger: Ledger) -> None:
    ledger.put_messages("s", [{"role": "user", "content": "a b"}, {"role": "user", "content": "c"}])
    ledger.archive_oldest("s", 1)  # v3
    ledger.put("s", {"role": "assistant", "content": "d e f"})  # v4
    ledger.reset("s")  # v5
    heads = [ledger.head("s", as_of_version=v) for v in range(1, 6)]
    assert [(h.version, h.message_count, h.archived_count, h.last_event) for h in heads] == [
        (1, 0, 0, "SessionStarted"),
        (2, 2, 0, "MessagesAppended"),
        (3, 1, 1, "MessagesArchived"),
        (4, 2, 1, "MessagesAppended"),
        (5, 0, 0, "HistoryCleared"),
    ]
    assert [h.token_total for h in heads[:2]] == [0, 3]
    assert len({h.created_at for h in heads}) == 1
    assert [h.updated_at for h in heads] == [e.recorded_at for e in ledger.audit("s")]
    assert ledger.head("s") == heads[-1]


def test_head_at_a_moment_is_the_last_version_at_or_before_it(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "a"})
    ledger.put("s", {"role": "user", "content": "b"})
    times = [e.recorded_at for e in ledger.audit("s")]
    assert ledger.head("s", as_of=times[1]).version == 2
    assert ledger.head("s", as_of=times[2]).message_count == 2


def test_head_at_a_version_it_never_had_is_refused(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "a"})
    with pytest.raises(StateNotFound):
        ledger.head("s", as_of_version=3)
    with pytest.raises(InvalidInput):
        ledger.head("s", as_of_version=1, as_of=ledger.head("s").created_at)
    with pytest.raises(SessionNotFound):
        ledger.head("absent", as_of_version=1)
