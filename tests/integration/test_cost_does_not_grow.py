"""`put` and `get` cost the same at 100 and 10,000 messages: counted, not timed."""

from __future__ import annotations

import sqlite3
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql as psql

from session_ledger.domain.ledger import Ledger
from session_ledger.projections import eventsourcing_compat
from session_ledger.projections.postgres import PostgresReader
from session_ledger.projections.postgres_append import to_psycopg
from session_ledger.projections.sql import TAIL_BATCH
from tests.conftest import make_ledger, make_settings

WORDS = [
    "lorem",
    "ipsum",
    "dolor",
    "sit",
    "amet",
    "consectetur",
    "adipiscing",
    "elit",
    "sed",
    "do",
    "eiusmod",
    "tempor",
]


def message(i: int) -> dict[str, str]:
    role = "user" if i % 2 == 0 else "assistant"
    return {"role": role, "content": " ".join(WORDS[(i + j) % len(WORDS)] for j in range(40))}


class EventReads:
    """Counts the stored events (and snapshots) the ledger reads."""

    def __init__(self, ledger: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
        self.rows = 0
        self.selects = 0
        recorders = [ledger.recorder] + ([ledger.snapshots.recorder] if ledger.snapshots else [])
        for recorder in recorders:
            monkeypatch.setattr(recorder, "select_events", self._counting(recorder.select_events))

    def _counting(self, select: Callable[..., Any]) -> Callable[..., Any]:
        def select_events(*args: Any, **kwargs: Any) -> Any:
            rows = select(*args, **kwargs)
            self.selects += 1
            self.rows += len(rows)
            return rows

        return select_events

    def during(self, call: Callable[[], object]) -> int:
        before = self.rows
        call()
        return self.rows - before


def view_rows_during(ledger: Ledger, call: Callable[[], object]) -> int:
    before = ledger.views.rows_read  # type: ignore[attr-defined]
    call()
    return int(ledger.views.rows_read - before)  # type: ignore[attr-defined]


@pytest.fixture
def grown(store: str, tmp_path: Path) -> Ledger:
    """Two sessions on one store: 100 messages and 10,000 messages."""
    ledger = make_ledger(make_settings(store, tmp_path))
    ledger.put_messages("small", [message(i) for i in range(100)])
    for start in range(0, 10_000, 2_000):
        ledger.put_messages("large", [message(i) for i in range(start, start + 2_000)])
    return ledger


def test_get_reads_only_the_window(grown: Ledger) -> None:
    for limit in (100, 1_000, 3_000):  # windows shorter than the small session
        window = len(grown.get("large", token_limit=limit))
        small = view_rows_during(grown, lambda limit=limit: grown.get("small", token_limit=limit))
        large = view_rows_during(grown, lambda limit=limit: grown.get("large", token_limit=limit))
        # the same reads, but that the short session can run out of rows first
        assert small <= large, (limit, small, large)
        if window < TAIL_BATCH:  # the window and the row after it: one first batch
            assert small == large == TAIL_BATCH, (limit, small, large)
        assert large <= 2 * (window + 1) + TAIL_BATCH, (limit, window, large)
    for limit in (100, 4_000, 40_000):
        window = len(grown.get("large", token_limit=limit))
        large = view_rows_during(grown, lambda limit=limit: grown.get("large", token_limit=limit))
        # the window, the row after it, and the overshoot of the doubling batches
        assert large <= 2 * (window + 1) + TAIL_BATCH, (limit, window, large)
    grown.close()


def test_put_reads_no_history(grown: Ledger, monkeypatch: pytest.MonkeyPatch) -> None:
    reads = EventReads(grown, monkeypatch)
    grown.put("small", message(0))
    grown.put("large", message(0))  # warm the cache for both
    small = reads.during(lambda: grown.put("small", message(1)))
    large = reads.during(lambda: grown.put("large", message(1)))
    small_rows = view_rows_during(grown, lambda: grown.put("small", message(2)))
    large_rows = view_rows_during(grown, lambda: grown.put("large", message(2)))
    assert small == large == 0
    assert small_rows == large_rows == 0
    grown.close()


def test_a_cold_put_reads_a_snapshot_and_a_bounded_tail(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path, snapshot_interval=20)
    ledger = make_ledger(settings)
    for i in range(300):
        ledger.put("long", message(i))
    ledger.close()

    cold = make_ledger(settings)  # a new process: empty cache
    reads = EventReads(cold, monkeypatch := pytest.MonkeyPatch())
    try:
        read = reads.during(lambda: cold.put("long", message(300)))
        assert 1 <= read <= 20  # the latest snapshot and the events after it
        assert cold.head("long").message_count == 301
    finally:
        monkeypatch.undo()
        cold.close()


def test_a_put_that_starts_a_session_reads_no_events(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session this process has not cached, written by a call that may create it, is
    taken for new: no SELECT of snapshots or events. When another process had started it,
    the taken version fails to save, and the write runs again on the stored state."""
    settings = make_settings(store, tmp_path)
    ledger, other = make_ledger(settings), make_ledger(settings)
    reads = EventReads(ledger, monkeypatch)
    try:
        before = reads.selects
        ledger.put("new", message(0))
        assert reads.selects == before
        assert ledger.head("new").message_count == 1
        if store == "memory":
            return  # one process's private store: no other process to have started it
        other.put("started elsewhere", message(0))
        started = other.head("started elsewhere").version
        assert ledger.put("started elsewhere", message(1)).version == started + 1
        assert reads.selects > before  # the guess failed: the stored state was read
        assert [m.content for m in ledger.get_all("started elsewhere")] == [
            message(0)["content"], message(1)["content"]
        ]  # fmt: skip
        assert ledger.verify("started elsewhere").intact
    finally:
        ledger.close()
        other.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_stale_cached_copy_reads_only_the_events_written_since(
    store: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes take turns at one session (two API workers behind a balancer): the
    copy each caches is one write behind at every turn. Its save fails on its version,
    and the write catches the copy up with the one event written since: no snapshot,
    no replay of the events the copy holds already."""
    settings = make_settings(store, tmp_path, snapshot_interval=200)
    ledger, other = make_ledger(settings), make_ledger(settings)
    reads = EventReads(ledger, monkeypatch)
    try:
        for i in range(150):  # 151 events: the last snapshot is of version 1 (none later)
            ledger.put("shared", message(i))
        for turn in range(3):
            other.put("shared", message(1000 + turn))
            rows, selects = reads.rows, reads.selects
            ledger.put("shared", message(2000 + turn))
            assert (reads.rows - rows, reads.selects - selects) == (1, 1), turn
        assert ledger.head("shared").message_count == 156
        assert ledger.verify("shared").intact
    finally:
        ledger.close()
        other.close()


def test_a_past_window_reads_only_its_tail(grown: Ledger) -> None:
    """At version 2 the large session held its first 2,000 messages; the 8,000 appended
    later are not scanned."""
    now = view_rows_during(grown, lambda: grown.get("large", token_limit=1_000))
    then = view_rows_during(grown, lambda: grown.get("large", token_limit=1_000, as_of_version=2))
    assert then == now + 1  # plus the session row that says version 2 exists
    assert (
        grown.get("large", token_limit=1_000, as_of_version=2)[-1].content
        == message(1_999)["content"]
    )
    grown.close()


class SQLiteSteps:
    """Counts the SQLite virtual machine's steps on every connection the ledger opens (a
    progress handler called every STEP instructions): it grows with the rows a
    statement visits, including rows it skips, which `rows_read` does not see."""

    STEP = 50

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        connect = sqlite3.connect

        def counted(*args: Any, **kwargs: Any) -> Any:
            conn = connect(*args, **kwargs)
            conn.set_progress_handler(self._tick, self.STEP)
            return conn

        monkeypatch.setattr(eventsourcing_compat.sqlite3, "connect", counted)

    def _tick(self) -> int:
        self.count += 1
        return 0  # go on

    def during(self, call: Callable[[], object]) -> int:
        before = self.count
        call()
        return self.count - before


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_removals_and_their_audit_visit_few_rows(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Removing a message, and the audit entry of a replace, at 10,000 messages visit
    about the rows they do at 100: no scan of the session for the rows that ended at a
    version (token totals, audit), nor from its start for the last message."""
    steps = SQLiteSteps(monkeypatch)
    ledger = make_ledger(make_settings(backend, tmp_path))
    sizes = {"small": 100, "large": 10_000}
    for key, n in sizes.items():
        for start in range(0, n, 2_000):
            ledger.put_messages(key, [message(i) for i in range(start, min(n, start + 2_000))])
    operations: dict[str, Callable[[str], object]] = {
        "delete_last_message": ledger.delete_last_message,
        "delete_message(-3)": lambda key: ledger.delete_message(key, -3),
        "delete_message(2)": lambda key: ledger.delete_message(key, 2),
        "archive_oldest(2)": lambda key: ledger.archive_oldest(key, 2),
    }
    for name, operation in operations.items():
        operation("small")
        operation("large")  # warm: the statements are compiled, the sessions cached
        small = steps.during(lambda op=operation: op("small"))
        large = steps.during(lambda op=operation: op("large"))
        assert large <= small * 1.5 + 20, (name, small, large)
    for key in sizes:  # a replace that keeps all but the last message
        ledger.set(key, ledger.get_all(key)[:-1])
    last = {key: ledger.head(key).version - 1 for key in sizes}
    audits = {
        key: steps.during(lambda key=key: ledger.audit(key, after_version=last[key]))
        for key in sizes
    }
    assert audits["large"] <= audits["small"] * 1.5 + 20, audits
    ledger.close()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
def test_get_passes_no_ended_rows(
    backend: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session whose newest message was replaced 1,000 times answers `get` and
    `get_all` visiting about the rows a session of its live messages alone does: the
    ended rows are in a table of their own, not between the live ones. (A read at a past
    version still passes the ended rows whose ids lie in its range.)"""
    steps = SQLiteSteps(monkeypatch)
    ledger = make_ledger(make_settings(backend, tmp_path))
    for key in ("plain", "churned"):
        ledger.put_messages(key, [message(i) for i in range(50)])
    for i in range(1_000):
        ledger.delete_last_message("churned")
        ledger.put("churned", message(i))
    assert len(ledger.get_all("churned")) == 50
    reads: dict[str, Callable[[str], object]] = {
        "get": lambda key: ledger.get(key, token_limit=3_000),
        "get_all": ledger.get_all,
    }
    for name, read in reads.items():
        read("plain")
        read("churned")  # warm: the statements are compiled
        plain = steps.during(lambda r=read: r("plain"))
        churned = steps.during(lambda r=read: r("churned"))
        assert churned <= plain * 1.5 + 20, (name, plain, churned)
    ledger.close()


def test_an_append_only_appends(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A put to a session that exists inserts its event, message row and timeline row, and
    updates nothing: the session's head is its newest timeline row, not a row rewritten
    (a page written to the WAL and fsynced) by every write."""
    statements: list[str] = []
    connect = sqlite3.connect

    def traced(*args: Any, **kwargs: Any) -> Any:
        conn = connect(*args, **kwargs)
        conn.set_trace_callback(statements.append)
        return conn

    monkeypatch.setattr(eventsourcing_compat.sqlite3, "connect", traced)
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    ledger.put("s", message(0))
    statements.clear()
    ledger.put("s", message(1))
    writes = [
        " ".join(s.split()[:3])
        for s in statements
        if s.startswith(("INSERT", "UPDATE", "DELETE", "REPLACE"))
    ]
    assert writes == [
        "INSERT INTO ledger_events",
        "INSERT INTO ledger_messages",
        "INSERT INTO ledger_timeline",
    ]
    head = ledger.head("s")
    assert (head.version, head.message_count, head.token_total) == (3, 2, 80)
    ledger.close()


def _rows_scanned(plan: dict[str, Any], table: str) -> int:
    """Rows that the plan's scans of `table` produced, over all their loops."""
    own = 0
    if plan.get("Relation Name") == table:
        own = int(plan.get("Actual Rows", 0)) * int(plan.get("Actual Loops", 1))
    return own + sum(_rows_scanned(p, table) for p in plan.get("Plans", []))


class ServerScans:
    """Runs EXPLAIN ANALYZE of every message read the ledger makes through
    `PostgresReader.tuples` (the window's and the history's rows), on the reader's own
    connection and transaction (so with the settings the read has), first as a custom
    plan (its parameters known to the planner, as in the first reads of a prepared
    statement) and then as a generic plan (what PostgreSQL may settle on after five), and
    keeps the rows each plan's scans of the message tables produced."""

    TABLES = ("ledger_messages", "ledger_ended_messages")

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scans: list[tuple[str, str, int]] = []  # (plan, statement, rows)
        real = PostgresReader.tuples

        def tuples(reader: PostgresReader, sql: str, params: Sequence[Any]) -> Any:
            self._explain(reader, sql, params)
            return real(reader, sql, params)

        monkeypatch.setattr(PostgresReader, "tuples", tuples)

    def _explain(self, reader: PostgresReader, sql: str, params: Sequence[Any]) -> None:
        statement = to_psycopg(sql)
        table = next((t for t in self.TABLES if f"FROM {t} " in statement), None)
        if table is None:
            return
        cursor = reader.cursor
        cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + statement, params)
        self._keep("custom", statement, table, cursor.fetchone())
        numbered = statement
        for n in range(1, len(params) + 1):
            numbered = numbered.replace("%s", f"${n}", 1)
        cursor.execute("PREPARE ledger_probe AS " + numbered)  # parameter types inferred
        cursor.execute("SET plan_cache_mode = force_generic_plan")
        literals = psql.SQL(", ").join(psql.Literal(p) for p in params)
        cursor.execute(
            psql.SQL("EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE ledger_probe({})").format(literals)
        )
        self._keep("generic", statement, table, cursor.fetchone())
        cursor.execute("RESET plan_cache_mode")
        cursor.execute("DEALLOCATE ledger_probe")

    def _keep(self, kind: str, statement: str, table: str, row: Any) -> None:
        plan = row["QUERY PLAN"][0]["Plan"]  # the reader's cursor makes dict rows
        self.scans.append((kind, statement, _rows_scanned(plan, table)))


def test_postgres_reads_a_window_in_key_order_whatever_its_statistics(
    fresh_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The planner's estimates cannot make a window read its whole session. Statistics
    gathered while the store held short sessions (as most are) said a session holds a
    few rows, and a session that grew long afterwards was read whole for its window of
    25 (a bitmap scan of its 10,000 rows, then a sort), once the prepared statement's
    generic plan took over; the server must scan no more than one tail batch."""
    settings = make_settings("postgres", tmp_path)
    settings.database_url = fresh_postgres_url
    ledger = make_ledger(settings)
    for k in range(300):
        ledger.put_messages(f"short-{k}", [message(0), message(1)])
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute("ANALYZE")
    for start in range(0, 10_000, 2_000):
        ledger.put_messages("long", [message(i) for i in range(start, start + 2_000)])
    then = ledger.head("long").version - 1  # 8,000 messages then

    scans = ServerScans(monkeypatch)
    window = ledger.get("long", token_limit=1_000)
    past = ledger.get("long", token_limit=1_000, as_of_version=then)
    monkeypatch.undo()

    assert 0 < len(window) < TAIL_BATCH and window[-1].content == message(9_999)["content"]
    assert 0 < len(past) < TAIL_BATCH and past[-1].content == message(7_999)["content"]
    assert {kind for kind, _, _ in scans.scans} == {"custom", "generic"}
    wide = [(kind, rows, statement) for kind, statement, rows in scans.scans if rows > TAIL_BATCH]
    assert not wide, f"reads that scanned more than one batch of {TAIL_BATCH} rows: {wide}"
    ledger.close()


def test_a_history_read_makes_three_objects_a_text_message(grown: Ledger) -> None:
    # The message, its role and its text: its one text block and empty
    # additional_kwargs are made only when asked for (objects counted, not timed).
    del grown.get_all("large")[:]  # statements prepared, caches warm
    before = sys.getallocatedblocks()
    history = grown.get_all("large")
    made = sys.getallocatedblocks() - before
    assert len(history) == 10_000
    assert made <= 3 * len(history) + 100, made / len(history)
    assert history[1].blocks == ({"block_type": "text", "text": message(1)["content"]},)
    assert history[1].additional_kwargs == {} and history[1].content == message(1)["content"]
    grown.close()


def test_a_window_of_messages_ending_in_whitespace_reads_only_the_window(
    store: str, tmp_path: Path
) -> None:
    """cl100k_base windows are counted joined after each message that is empty or ends
    in a newline (domain.tokens.JoinedWindow); the read still stops where the window
    does, at 100 and at 10,000 messages, now and at a past version."""
    ledger = make_ledger(make_settings(store, tmp_path, tokenizer="cl100k_base"))

    def edged(i: int) -> dict[str, str]:
        return {**message(i), "content": "" if i % 7 == 0 else message(i)["content"] + "\n"}

    ledger.put_messages("small", [edged(i) for i in range(100)])
    for start in range(0, 10_000, 2_000):
        ledger.put_messages("large", [edged(i) for i in range(start, start + 2_000)])
    for limit in (100, 1_000, 3_000):
        window = len(ledger.get("large", token_limit=limit))
        small = view_rows_during(ledger, lambda limit=limit: ledger.get("small", token_limit=limit))
        large = view_rows_during(ledger, lambda limit=limit: ledger.get("large", token_limit=limit))
        assert small <= large <= 2 * (window + 1) + TAIL_BATCH, (limit, window, small, large)
        then = view_rows_during(
            ledger, lambda limit=limit: ledger.get("large", token_limit=limit, as_of_version=2)
        )
        assert then <= 2 * (window + 1) + TAIL_BATCH + 1, (limit, window, then)
    ledger.close()
