"""`migrate` moves a store whose session row held the head (the layout before 2026-12-02,
updated by every write) to the layout whose newest timeline row is the head: heads,
windows and histories read the same, writes go on, and `rebuild` derives the totals the
older timeline rows lack."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable

import psycopg
import pytest

from session_ledger.api.bootstrap import migrate
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.rebuild import check, rebuild
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger
from tests.integration.test_rebuild import write_a_bit_of_everything

OLD_COLUMNS = ("version", "message_count", "archived_count", "token_total", "updated_at")
# The session table as `migrate` made it before; filled with each session's head.
SQLITE_DOWNGRADE = (
    "DROP TABLE ledger_schema",  # stores made before migrations were numbered
    "CREATE TABLE old_sessions (session_id TEXT PRIMARY KEY, tenant TEXT NOT NULL,"
    " session_key TEXT NOT NULL, version INTEGER NOT NULL, message_count INTEGER NOT NULL,"
    " archived_count INTEGER NOT NULL, token_total INTEGER NOT NULL,"
    " created_at TEXT NOT NULL, updated_at TEXT NOT NULL) WITHOUT ROWID",
    "INSERT INTO old_sessions SELECT s.session_id, s.tenant, s.session_key, t.version,"
    " t.message_count, t.archived_count, t.token_total, s.created_at, t.recorded_at"
    " FROM ledger_sessions s JOIN ledger_timeline t ON t.session_id = s.session_id"
    " AND t.version = (SELECT max(version) FROM ledger_timeline WHERE session_id = s.session_id)",
    "DROP TABLE ledger_sessions",
    "ALTER TABLE old_sessions RENAME TO ledger_sessions",
    "CREATE UNIQUE INDEX ledger_sessions_key ON ledger_sessions (tenant, session_key)",
    "ALTER TABLE ledger_timeline DROP COLUMN archived_count",
    "ALTER TABLE ledger_timeline DROP COLUMN token_total",
)
POSTGRES_DOWNGRADE = (
    "DROP TABLE ledger_schema",  # stores made before migrations were numbered
    "ALTER TABLE ledger_sessions ADD COLUMN version bigint, ADD COLUMN message_count bigint,"
    " ADD COLUMN archived_count bigint, ADD COLUMN token_total bigint,"
    " ADD COLUMN updated_at timestamptz",
    "UPDATE ledger_sessions s SET version = t.version, message_count = t.message_count,"
    " archived_count = t.archived_count, token_total = t.token_total,"
    " updated_at = t.recorded_at FROM ledger_timeline t WHERE t.session_id = s.session_id"
    " AND t.version = (SELECT max(version) FROM ledger_timeline WHERE session_id = s.session_id)",
    *(f"ALTER TABLE ledger_sessions ALTER COLUMN {c} SET NOT NULL" for c in OLD_COLUMNS),
    "ALTER TABLE ledger_timeline DROP COLUMN archived_count, DROP COLUMN token_total",
)


def downgrade(store: str, url: str) -> Callable[[str], list[str]]:
    """Turn the store into the old layout; returns a reader of a table's column names."""
    if store == "sqlite":
        path = url.removeprefix("sqlite:///")
        with sqlite3.connect(path) as conn:
            for statement in SQLITE_DOWNGRADE:
                conn.execute(statement)

        def sqlite_columns(table: str) -> list[str]:
            with sqlite3.connect(path) as conn:
                return [r[1] for r in conn.execute(f"PRAGMA table_info({table})")]

        return sqlite_columns
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in POSTGRES_DOWNGRADE:
            conn.execute(statement)

    def postgres_columns(table: str) -> list[str]:
        with psycopg.connect(url) as conn:
            rows = conn.execute(
                "SELECT column_name FROM information_schema.columns WHERE table_name = %s"
                " AND table_schema = current_schema() ORDER BY ordinal_position",
                (table,),
            )
            return [r[0] for r in rows]

    return postgres_columns


def reads(ledger: Ledger, keys: list[str]) -> list[object]:
    return [(ledger.head(k), ledger.history(k).json(), ledger.get(k, token_limit=5)) for k in keys]


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_migrate_moves_the_head_onto_the_timeline(store: str, own_store_settings: Settings) -> None:
    settings = own_store_settings  # the test alters the tables
    keys = ["a", "b"]
    ledger = make_ledger(settings)
    for key in keys:
        write_a_bit_of_everything(ledger, key)
    before = reads(ledger, keys)
    ledger.close()

    columns = downgrade(store, settings.database_url)
    assert set(OLD_COLUMNS) <= set(columns("ledger_sessions"))
    migrate(settings)
    assert columns("ledger_sessions") == ["session_id", "tenant", "session_key", "created_at"]
    assert columns("ledger_timeline")[-2:] == ["archived_count", "token_total"]

    ledger = make_ledger(settings)  # migrate again: a second run changes nothing
    assert reads(ledger, keys) == before
    views = ledger.views
    assert isinstance(views, SQLViews)
    # Only the heads' totals were kept: the older timeline rows wait for `rebuild`.
    differences = check(views, ledger.mapper, ledger.tokenizer)
    assert differences and all(d.startswith("ledger_timeline:") for d in differences)

    total = ledger.head("a").token_total
    ledger.put("a", {"role": "user", "content": "two more"})
    assert ledger.head("a").token_total == total + 2
    rebuild(views, ledger.mapper, ledger.tokenizer)
    assert check(views, ledger.mapper, ledger.tokenizer) == []
    assert ledger.head("a").token_total == total + 2
    ledger.close()
