"""Point-in-time reads and the audit trail, on every store."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from session_ledger.domain.errors import InvalidInput, SessionNotFound, StateNotFound
from session_ledger.domain.ledger import Ledger


def texts(messages: list) -> list:  # type: ignore[type-arg]
    return [m.content for m in messages]


def timeline(ledger: Ledger, key: str) -> list[datetime]:
    return [e.recorded_at for e in ledger.audit(key)]


def test_as_of_version_reads_every_past_state(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "a"})  # v1 started, v2 appended
    ledger.put("s", {"role": "assistant", "content": "b"})  # v3
    ledger.set("s", [{"role": "user", "content": "c"}])  # v4
    ledger.reset("s")  # v5
    assert [texts(ledger.get_all("s", as_of_version=v)) for v in range(1, 6)] == [
        [],
        ["a"],
        ["a", "b"],
        ["c"],
        [],
    ]
    assert texts(ledger.get("s", as_of_version=3, token_limit=1)) == ["a", "b"][-1:]


def test_as_of_timestamp_between_events_gives_the_earlier_state(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "first"})
    ledger.put("s", {"role": "user", "content": "second"})
    t = timeline(ledger, "s")
    assert t == sorted(t)  # time never runs backwards within a session
    assert texts(ledger.get_all("s", as_of=t[1])) == ["first"]
    between = t[1] + (t[2] - t[1]) / 2 if t[2] > t[1] else t[1]
    assert texts(ledger.get_all("s", as_of=between)) == ["first"]
    assert texts(ledger.get_all("s", as_of=t[2] + timedelta(days=1))) == ["first", "second"]
    assert texts(ledger.get("s", as_of=t[1], token_limit=100)) == ["first"]


def test_naive_timestamps_are_utc(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "x"})
    aware = timeline(ledger, "s")[-1]
    naive = aware.astimezone(UTC).replace(tzinfo=None)
    assert texts(ledger.get_all("s", as_of=naive)) == ["x"]
    east = aware.astimezone(timezone(timedelta(hours=5)))
    assert texts(ledger.get_all("s", as_of=east)) == ["x"]


def test_before_the_first_event_there_is_no_state(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "x"})
    first = timeline(ledger, "s")[0]
    with pytest.raises(StateNotFound, match="did not exist yet"):
        ledger.get_all("s", as_of=first - timedelta(microseconds=1))
    for v in (0, 3, 99):
        with pytest.raises(StateNotFound, match="has no version"):
            ledger.get_all("s", as_of_version=v)
    with pytest.raises(SessionNotFound):
        ledger.get_all("nobody", as_of_version=1)
    with pytest.raises(InvalidInput, match="not both"):
        ledger.get_all("s", as_of_version=1, as_of=first)
    with pytest.raises(InvalidInput):
        ledger.get_all("s", as_of="yesterday")  # type: ignore[arg-type]


def test_the_audit_trail_says_who_changed_what(ledger: Ledger) -> None:
    ledger.put("s", {"role": "user", "content": "a"}, actor="agent-7", reason="turn 1")
    ledger.put("s", {"role": "user", "content": "b"}, idempotency_key="k1")
    ledger.set("s", [{"role": "user", "content": "a"}, {"role": "user", "content": "z"}])
    ledger.delete_message("s", 0, actor="alice", reason="GDPR request")
    ledger.archive_oldest("s", 1)
    ledger.reset("s", actor="admin")
    entries = ledger.audit("s")
    assert [e.event_type for e in entries] == [
        "SessionStarted", "MessagesAppended", "MessagesAppended", "HistoryReplaced",
        "MessageRemoved", "MessagesArchived", "HistoryCleared",
    ]  # fmt: skip
    assert [e.version for e in entries] == list(range(1, 8))
    assert (entries[1].actor, entries[1].reason) == ("agent-7", "turn 1")
    assert entries[2].idempotency_key == "k1"
    assert entries[1].changes["added"][0]["blocks"][0]["text"] == "a"
    replaced = entries[3].changes
    assert replaced["kept"] == 1
    assert [m["blocks"][0]["text"] for m in replaced["removed"]] == ["b"]
    assert [m["blocks"][0]["text"] for m in replaced["added"]] == ["z"]
    assert entries[4].changes["removed"]["blocks"][0]["text"] == "a"
    assert (entries[4].actor, entries[4].reason) == ("alice", "GDPR request")
    assert entries[5].changes == {"archived": 1}
    assert entries[6].changes == {"cleared": 0, "cleared_archived": 1}
    assert [e.version for e in ledger.audit("s", after_version=5, limit=1)] == [6]


def test_a_replace_lists_what_it_removed_up_to_a_bound_and_says_how_many(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A set may remove a whole history: its entry (and an audit page, whose first entry
    is answered whatever its size) lists the removed messages up to LISTED_REMOVED_BYTES,
    then says how many it removed; the rest are read at the version before."""
    from session_ledger.domain import audit

    monkeypatch.setattr(audit, "LISTED_REMOVED_BYTES", 1000)
    history = [{"role": "user", "content": f"{i} " + "x" * 300} for i in range(10)]
    ledger.set("s", history)
    ledger.set("s", [history[0]])
    ledger.set("s", [])
    one, everything = (e.changes for e in ledger.audit("s")[-2:])
    assert (one["kept"], len(one["removed"]), one["removed_count"]) == (1, 2, 9)
    assert [m["blocks"][0]["text"][:2] for m in one["removed"]] == ["1 ", "2 "]
    assert (everything["removed"][0]["blocks"][0]["text"][:2], everything["added"]) == ("0 ", [])
    assert "removed_count" not in everything  # all listed: one message
    assert len(texts(ledger.get_all("s", as_of_version=2))) == 10  # the rest, as they were


def test_set_keeps_the_ids_of_an_unchanged_prefix(ledger: Ledger) -> None:
    history = [{"role": "user", "content": str(i)} for i in range(5)]
    ledger.set("s", history)
    ledger.set("s", [*history, {"role": "assistant", "content": "5"}])
    entry = ledger.audit("s")[-1]
    assert (entry.changes["kept"], entry.changes["removed"]) == (5, [])
    assert texts(ledger.get_all("s")) == ["0", "1", "2", "3", "4", "5"]
    assert texts(ledger.get_all("s", as_of_version=2)) == ["0", "1", "2", "3", "4"]


def test_every_moment_maps_to_the_last_version_recorded_by_then(ledger: Ledger) -> None:
    # The lookup binary-searches the timeline: check it against a linear scan at every
    # event time, just before it and just after it, over an odd and an even length.
    for n in (1, 8, 37):
        key = f"t{n}"
        for i in range(n):
            ledger.put(key, {"role": "user", "content": f"m{i}"})
        times = timeline(ledger, key)
        tick = timedelta(microseconds=1)
        for moment in sorted({m + d for m in times for d in (-tick, timedelta(0), tick)}):
            expected = max((v for v, at in enumerate(times, 1) if at <= moment), default=None)
            if expected is None:
                with pytest.raises(StateNotFound):
                    ledger.get_all(key, as_of=moment)
            else:
                assert len(ledger.get_all(key, as_of=moment)) == expected - 1


def test_a_moment_in_an_early_year_is_before_every_session(ledger: Ledger) -> None:
    # Times are compared as fixed-width text on SQLite: year 1 must sort before 2026.
    ledger.put("s", {"role": "user", "content": "x"})
    with pytest.raises(StateNotFound):
        ledger.get_all("s", as_of=datetime(1, 1, 1, tzinfo=UTC))
    with pytest.raises(StateNotFound):
        ledger.get_all("s", as_of=datetime(999, 12, 31, tzinfo=UTC))
