"""PostgreSQL plans each hot read once per connection, not on every execution.

A prepared statement is planned with its parameters known for its first five executions;
then PostgreSQL keeps the parameter-free (generic) plan if that costs no more than the
custom ones. The window's tail read used to end in `LIMIT ? OFFSET ?`: the unknown offset
made every generic plan look dearer, so each window was planned again (about 80 µs of
the server's time, more than running it). Counted from `pg_prepared_statements`, not timed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import psycopg
from psycopg.rows import tuple_row

from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings

READS = 20


def _plans(ledger: Ledger) -> dict[str, list[tuple[int, int]]]:
    """Per prepared statement: (generic, custom) plans made on each pooled connection."""
    pool: Any = ledger.recorder.datastore.pool  # type: ignore[attr-defined]
    taken = [pool.getconn() for _ in range(pool.get_stats()["pool_available"])]
    try:
        found: dict[str, list[tuple[int, int]]] = {}
        for conn in taken:
            with conn.cursor(row_factory=tuple_row) as cursor:
                cursor.execute(
                    "SELECT statement, generic_plans, custom_plans FROM pg_prepared_statements"
                )
                for statement, generic, custom in cursor.fetchall():
                    found.setdefault(" ".join(statement.split()), []).append((generic, custom))
        return found
    finally:
        for conn in taken:
            pool.putconn(conn)


def test_window_and_history_reads_keep_their_generic_plan(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("postgres", tmp_path, pool_size=1))
    try:
        ledger.put_messages("s", [{"role": "user", "content": f"m {i}"} for i in range(30)])
        for _ in range(READS):
            assert len(ledger.get("s", token_limit=50)) > 0
            assert len(ledger.get_all("s")) == 30
        reads = {
            statement: counts
            for statement, counts in _plans(ledger).items()
            if statement.startswith("SELECT") and "FROM ledger_messages" in statement
        }
        assert len(reads) == 2, reads  # the window's tail and the history
        for statement, counts in reads.items():
            assert sum(g + c for g, c in counts) >= READS, (statement, counts)
            _settled(statement, counts)
    finally:
        ledger.close()


def test_every_statement_of_an_agents_turn_keeps_its_generic_plan(tmp_path: Path) -> None:
    """A turn: the window, then a put; now and then the head and a past window. Every
    statement run more than five times is planned five times at most. (The audit trail
    reads the events with the eventsourcing library's own statement, not the ledger's.)"""
    ledger = make_ledger(make_settings("postgres", tmp_path, pool_size=1))
    try:
        for turn in range(READS):
            ledger.get("s", token_limit=50)
            ledger.put("s", {"role": "user" if turn % 2 else "assistant", "content": f"t {turn}"})
            ledger.head("s")
            ledger.get("s", token_limit=50, as_of_version=1 + turn // 2)
        plans = _plans(ledger)
        assert len(plans) >= 5, plans
        for statement, counts in plans.items():
            if sum(g + c for g, c in counts) > 5:
                _settled(statement, counts)
    finally:
        ledger.close()


def _settled(statement: str, counts: list[tuple[int, int]]) -> None:
    """Five custom plans per connection at most, then the generic one for good."""
    assert all(custom <= 5 for _, custom in counts), (statement, counts)
    assert any(generic for generic, _ in counts), (statement, counts)


def test_reads_keep_their_generic_plan_once_statistics_saw_long_sessions(
    fresh_postgres_url: str, tmp_path: Path
) -> None:
    """With long sessions in the statistics, a `LIMIT ?` of the tail read made the generic
    plan look dearer (PostgreSQL assumes a tenth of the rows it expects), and every window
    was planned anew: the tail's batch sizes are written into the statement."""
    settings = make_settings("postgres", tmp_path, pool_size=1)
    settings.database_url = fresh_postgres_url
    ledger = make_ledger(settings)
    try:
        for key in ("long-1", "long-2"):
            for start in range(0, 3_000, 1_000):
                ledger.put_messages(key, [{"role": "user", "content": f"m {i} and words"}
                                          for i in range(start, start + 1_000)])  # fmt: skip
        with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
            conn.execute("ANALYZE")
        for _ in range(READS):
            assert len(ledger.get("long-1", token_limit=50)) > 0
            assert len(ledger.get_all("long-2")) == 3_000
        for statement, counts in _plans(ledger).items():
            if statement.startswith("SELECT") and "FROM ledger_messages" in statement:
                _settled(statement, counts)
    finally:
        ledger.close()
