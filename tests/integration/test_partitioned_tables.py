"""`migrate --partitions N` on PostgreSQL: the events and the per-session views in N hash
partitions by session id, made on a new store or copied from an existing one, with every
read, write, check and verify as before; and a window read that touches one partition,
by an index, reading about the same rows at 100 and at 100,000 messages."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest

from session_ledger.api.bootstrap import migrate
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.postgres import PLANNER_SETTINGS, PostgresReader
from session_ledger.projections.postgres_append import to_psycopg
from session_ledger.projections.postgres_partitions import PARTITIONED_TABLES, partition_counts
from session_ledger.projections.rebuild import check, rebuild
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger, make_settings
from tests.e2e.conftest import run_cli, server_env
from tests.integration.test_rebuild import all_rows, write_a_bit_of_everything


@pytest.fixture
def settings(fresh_postgres_url: str, tmp_path: Any) -> Settings:
    settings = make_settings("postgres", tmp_path)
    settings.database_url = fresh_postgres_url
    return settings


def counts(url: str) -> dict[str, int]:
    """Each table's partitions, once every partition is seen to hold every index of its
    table, valid."""
    with psycopg.connect(url) as conn:
        invalid = conn.execute("SELECT count(*) FROM pg_index WHERE NOT indisvalid").fetchone()
        assert invalid == (0,)
        short = conn.execute(
            "SELECT h.inhrelid::regclass::text FROM pg_inherits h WHERE"
            " (SELECT count(*) FROM pg_index WHERE indrelid = h.inhrelid)"
            " <> (SELECT count(*) FROM pg_index WHERE indrelid = h.inhparent)"
        ).fetchall()
        assert short == []
        return partition_counts(conn.cursor())


def reads(ledger: Ledger, keys: list[str]) -> list[object]:
    return [
        (ledger.head(k), ledger.history(k).json(), ledger.get(k, token_limit=5),
         [e.version for e in ledger.audit(k)], ledger.verify(k))
        for k in keys
    ]  # fmt: skip


def views(ledger: Ledger) -> SQLViews:
    assert isinstance(ledger.views, SQLViews)
    return ledger.views


def test_migrate_makes_a_new_store_partitioned(settings: Settings) -> None:
    settings.partitions = 4
    ledger = make_ledger(settings)
    assert counts(settings.database_url) == dict.fromkeys(PARTITIONED_TABLES, 4)
    for key in ("a", "b", "c"):
        write_a_bit_of_everything(ledger, key)
    ledger.put_messages("a", [{"role": "user", "content": f"m{i}"} for i in range(300)])
    assert ledger.head("a").message_count == 301
    assert all(report.intact for report in ledger.verify_all())
    assert check(views(ledger), ledger.mapper, ledger.tokenizer) == []
    rows = all_rows(ledger)
    assert rebuild(views(ledger), ledger.mapper, ledger.tokenizer) == 31  # in place
    assert all_rows(ledger) == rows
    # the events keep their notification order across partitions
    ids = [n.id for n in ledger.recorder.select_notifications(1, 1000)]
    assert ids == sorted(ids) and len(ids) == len(set(ids)) == 31
    ledger.close()

    settings.partitions = None  # a later migrate without the option keeps the layout
    migrate(settings)
    assert counts(settings.database_url) == dict.fromkeys(PARTITIONED_TABLES, 4)


def test_migrate_copies_an_existing_store_into_partitions(settings: Settings) -> None:
    keys = ["a", "b", "c", "d"]
    ledger = make_ledger(settings)
    for key in keys:
        write_a_bit_of_everything(ledger, key)
    before, rows = reads(ledger, keys), all_rows(ledger)
    last_id = ledger.recorder.max_notification_id()
    ledger.close()
    assert counts(settings.database_url) == dict.fromkeys(PARTITIONED_TABLES, 0)

    for partitions in (3, 5):  # and from one partitioned layout to another
        settings.partitions = partitions
        ledger = make_ledger(settings)
        assert counts(settings.database_url) == dict.fromkeys(PARTITIONED_TABLES, partitions)
        assert reads(ledger, keys) == before
        assert all_rows(ledger) == rows
        assert check(views(ledger), ledger.mapper, ledger.tokenizer) == []
        ledger.close()

    ledger = make_ledger(settings)
    ledger.put("a", {"role": "user", "content": "after the move"})
    # The sequence kept, not restarted. (A process that has not seen "a" takes it for new
    # first: that insert fails on version 1 and uses up one number of the sequence.)
    assert (last_id or 0) < ledger.recorder.max_notification_id() <= (last_id or 0) + 2
    assert ledger.get_all("a")[-1].content == "after the move"
    assert all(report.intact for report in ledger.verify_all())
    ledger.close()


def test_partitions_are_refused_out_of_range_or_off_postgresql(
    settings: Settings, tmp_path: Any
) -> None:
    settings.partitions = 1
    with pytest.raises(InvalidInput, match="between 2 and"):
        migrate(settings)
    sqlite = make_settings("sqlite", tmp_path)
    sqlite.partitions = 4
    with pytest.raises(InvalidInput, match="PostgreSQL"):
        migrate(sqlite)


class Statements:
    """The statements the ledger's reads run, with their parameters."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.seen: list[tuple[str, Any]] = []
        call = PostgresReader.__call__

        def recorded(reader: PostgresReader, sql: str, params: Any) -> Any:
            self.seen.append((sql, params))
            return call(reader, sql, params)

        monkeypatch.setattr(PostgresReader, "__call__", recorded)


def scans(plan: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if "Relation Name" in plan and plan.get("Actual Loops", 0) > 0:
        yield plan
    for child in plan.get("Plans", ()):
        yield from scans(child)


def explained(url: str, statements: list[tuple[str, Any]], mode: str) -> list[dict[str, Any]]:
    """The scans each statement ran (EXPLAIN ANALYZE), planned as the ledger's
    connections plan, with a custom or a generic (prepared) plan."""
    found = []
    with psycopg.connect(url) as conn:
        conn.execute(PLANNER_SETTINGS)
        conn.execute(f"SET plan_cache_mode = {mode}")
        for sql, params in statements:
            explain = f"EXPLAIN (ANALYZE, FORMAT JSON) {to_psycopg(sql)}"
            plan = conn.execute(explain, params).fetchone()[0]  # type: ignore[index]
            plan = json.loads(plan) if isinstance(plan, str) else plan
            found += scans(plan[0]["Plan"])
    return found


def message(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"m{i}"}


def in_partition_of(ledger: Ledger, url: str, key: str) -> str:
    """A new session, of one message, in the partition that holds `key`'s rows (as in a
    large store, where every partition holds many sessions' rows)."""
    where = "SELECT t.tableoid::regclass::text FROM ledger_timeline t JOIN ledger_sessions s"
    where += " USING (session_id) WHERE s.session_key = %s LIMIT 1"
    with psycopg.connect(url) as conn:
        target = conn.execute(where, (key,)).fetchone()
        for n in range(100):
            ledger.put(f"small-{n}", message(0))
            if conn.execute(where, (f"small-{n}",)).fetchone() == target:
                return f"small-{n}"
    raise AssertionError("no session among 100 hashed to the partition")


def test_a_window_read_touches_one_partition_by_an_index(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings.partitions = 4
    ledger = make_ledger(settings)
    for i in range(0, 100_000, 100):  # 1,000 writes of 100 messages
        ledger.put_messages("large", [message(j) for j in range(i, i + 100)])
    small = in_partition_of(ledger, settings.database_url, "large")
    for j in range(1, 100):
        ledger.put(small, message(j))
    with psycopg.connect(settings.database_url, autocommit=True) as conn:
        for table in PARTITIONED_TABLES:
            conn.execute(f"ANALYZE {table}")
        parents = dict(conn.execute(
            "SELECT inhrelid::regclass::text, inhparent::regclass::text FROM pg_inherits"
        ).fetchall())  # fmt: skip
    rows: dict[str, int] = {}
    for key in (small, "large"):
        ledger.get(key, token_limit=50)  # warm: the session is known, statements prepared
        statements = Statements(monkeypatch)
        assert len(ledger.get(key, token_limit=50)) == 50
        monkeypatch.undo()
        for mode in ("force_custom_plan", "force_generic_plan"):
            found = explained(settings.database_url, statements.seen, mode)
            touched = {s["Relation Name"] for s in found if s["Relation Name"] in parents}
            assert {parents[t] for t in touched} >= {"ledger_messages", "ledger_timeline"}
            # one partition of each table, all of the same remainder (the session's)
            assert len(touched) == len({parents[t] for t in touched}), touched
            assert len({t.rsplit("_p", 1)[1] for t in touched}) == 1, touched
            kinds = {s["Node Type"] for s in found if s["Relation Name"] in parents}
            assert kinds <= {"Index Scan", "Index Only Scan"}, (
                key,
                mode,
                [(s["Relation Name"], s["Node Type"], s.get("Actual Rows")) for s in found],
            )
            rows[f"{key} {mode}"] = sum(
                s["Actual Rows"] * s["Actual Loops"] for s in found
                if parents.get(s["Relation Name"]) == "ledger_messages"
            )  # fmt: skip
    for mode in ("force_custom_plan", "force_generic_plan"):
        assert 50 <= rows[f"large {mode}"] <= 2 * max(rows[f"{small} {mode}"], 64), rows
    ledger.close()


def test_the_migrate_command_takes_the_number_of_partitions(fresh_postgres_url: str) -> None:
    env = server_env(fresh_postgres_url)
    done = run_cli(env, "migrate", "--partitions", "1")
    assert done.returncode != 0 and "partitions" in done.stderr, done.stderr
    done = run_cli(env, "migrate", "--partitions", "8")
    assert done.returncode == 0, done.stderr
    assert counts(fresh_postgres_url) == dict.fromkeys(PARTITIONED_TABLES, 8)
    done = run_cli({**env, "LEDGER_PARTITIONS": "2"}, "migrate")  # the setting, as serve reads it
    assert done.returncode == 0, done.stderr
    assert counts(fresh_postgres_url) == dict.fromkeys(PARTITIONED_TABLES, 2)
