"""The tenant feed on every store: a tenant's events across sessions in one order, read
from a position with no gap and no duplicate; on PostgreSQL, an event of a transaction
that took its id first but commits last is not skipped by a reader that resumes."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import psycopg
import pytest

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.tenant_feed import FeedEntry
from tests.conftest import make_ledger, make_settings


def read_all(ledger: Ledger, tenant: str, after: str, prefix: str = "", limit: int = 100) -> tuple[
    list[FeedEntry], str
]:  # fmt: skip
    """Every entry after `after`, page by page, and the position at the end (on
    PostgreSQL, once no event waits for a transaction still running anywhere on the
    server: the test server is shared)."""
    entries: list[FeedEntry] = []
    deadline = time.monotonic() + 60
    while True:
        page = ledger.tenant_events(tenant=tenant, prefix=prefix, after=after, limit=limit)
        entries += page.entries
        after = page.position
        if not page.more and not page.held_back:
            return entries, after
        assert time.monotonic() < deadline, "events held back for a minute"
        if not page.more:
            time.sleep(0.05)


def seen(entries: list[FeedEntry]) -> list[tuple[str, int, str]]:
    return [(e.key, e.entry.version, e.entry.event_type) for e in entries]


def test_a_tenants_events_across_sessions_in_commit_order(ledger: Ledger) -> None:
    mine, other = "feed-a", "feed-b"
    start = ledger.feed_position()
    ledger.put("chat/1", {"role": "user", "content": "hi"}, tenant=mine)
    ledger.put("chat/1", {"role": "user", "content": "hi"}, tenant=other)
    opened = ledger.open_stream("chat/2", tenant=mine)
    ledger.put("chat/1", {"role": "assistant", "content": "hello"}, tenant=mine)
    ledger.append_stream("chat/2", opened.stream_id, ["par", "tial"], tenant=mine)
    ledger.put("note/1", {"role": "user", "content": "x"}, tenant=mine)
    ledger.complete_stream("chat/2", opened.stream_id, ["."], tenant=mine)

    expected = [
        ("chat/1", 1, "SessionStarted"), ("chat/1", 2, "MessagesAppended"),
        ("chat/2", 1, "SessionStarted"), ("chat/2", 2, "StreamStarted"),
        ("chat/1", 3, "MessagesAppended"), ("chat/2", 3, "StreamChunksAppended"),
        ("note/1", 1, "SessionStarted"), ("note/1", 2, "MessagesAppended"),
        ("chat/2", 4, "StreamCompleted"),
    ]  # fmt: skip
    entries, end = read_all(ledger, mine, start)
    assert seen(entries) == expected
    assert entries[5].entry.changes["deltas"] == ["par", "tial"]
    # a page of 2 events looked at at a time: the same events, none twice
    paged, paged_end = read_all(ledger, mine, start, limit=2)
    assert seen(paged) == expected and paged_end == end
    assert [e.position for e in paged] == [e.position for e in entries]
    # a prefix; another tenant; and a resume from any entry's position
    assert seen(read_all(ledger, mine, start, prefix="chat/")[0]) == expected[:6] + expected[8:]
    assert seen(read_all(ledger, other, start)[0]) == [
        ("chat/1", 1, "SessionStarted"), ("chat/1", 2, "MessagesAppended")
    ]  # fmt: skip
    assert seen(read_all(ledger, mine, entries[3].position)[0]) == expected[4:]
    # nothing after the end, until the next write
    assert read_all(ledger, mine, end)[0] == []
    ledger.put("chat/1", {"role": "user", "content": "again"}, tenant=mine)
    assert seen(read_all(ledger, mine, end)[0]) == [("chat/1", 4, "MessagesAppended")]


def test_a_position_that_is_not_the_stores_is_refused(ledger: Ledger) -> None:
    ledger.put("k", {"role": "user", "content": "hi"})
    for bad in ("", "yesterday", "1.2.3", "-1", "9" * 80):
        with pytest.raises(InvalidInput):
            ledger.tenant_events(after=bad)
    future = "9" * 18 + (".0" if "." in ledger.feed_position() else "")
    with pytest.raises(InvalidInput, match="past"):
        ledger.tenant_events(after=future)


@pytest.mark.postgres
def test_an_event_committed_late_with_an_early_transaction_is_not_skipped(
    fresh_postgres_url: str, tmp_path: Path
) -> None:
    """Write A takes its transaction id and event id first, then waits on a lock while
    write B commits. A reader that read the feed then resumes from where it was gets A,
    then B: nothing passed A while A was in flight."""
    settings = make_settings("postgres", tmp_path)
    settings.database_url = fresh_postgres_url
    ledger = make_ledger(settings)
    tenant = settings.default_tenant
    try:
        ledger.put("slow", {"role": "user", "content": "before"})
        ledger.put("fast", {"role": "user", "content": "before"})
        start = ledger.feed_position()
        done: list[object] = []
        with psycopg.connect(fresh_postgres_url, autocommit=True) as holder:
            holder.execute("BEGIN")
            holder.execute("LOCK TABLE ledger_streams IN EXCLUSIVE MODE")
            slow = threading.Thread(
                target=lambda: done.append(ledger.open_stream("slow", stream_id="s1"))
            )
            slow.start()
            wait_for_lock_wait(holder)  # A inserted its event, and now waits
            ledger.put("fast", {"role": "user", "content": "B"})  # B commits
            page = ledger.tenant_events(tenant=tenant, after=start)
            assert page.entries == [] and page.held_back  # B waits for A
            resume_at = page.position
            holder.execute("COMMIT")
            slow.join(30)
        assert done, "the slow write did not finish"
        entries, _ = read_all(ledger, tenant, resume_at)
        assert seen(entries) == [("slow", 3, "StreamStarted"), ("fast", 3, "MessagesAppended")]
        ids = event_ids(fresh_postgres_url)
        assert ids["slow"] < ids["fast"]  # A's id is the smaller, and it committed last
    finally:
        ledger.close()


def wait_for_lock_wait(conn: psycopg.Connection[tuple[object, ...]]) -> None:
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        row = conn.execute(
            "SELECT count(*) FROM pg_locks WHERE NOT granted AND relation = "
            "'ledger_streams'::regclass"
        ).fetchone()
        if row and row[0]:
            return
        time.sleep(0.02)
    raise AssertionError("the slow write never waited on the lock")


def event_ids(url: str) -> dict[str, int]:
    with psycopg.connect(url) as conn:
        rows = conn.execute(
            "SELECT s.session_key, e.notification_id FROM ledger_events e JOIN ledger_sessions s"
            " ON s.session_id = e.originator_id WHERE e.originator_version = 3"
        ).fetchall()
    return {key: nid for key, nid in rows}
