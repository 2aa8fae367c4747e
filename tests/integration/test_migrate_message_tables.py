"""`migrate` moves a store whose transcript was one table of live and ended rows (the
layout before 2026-12-02, with an index of the live rows that every append wrote) to
the live rows' own table and `ledger_ended_messages`: every read, now and at past
versions, gives what it gave before, the views equal a rebuild, and writes go on."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import StoreNotReady
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.tokens import load_tokenizer
from session_ledger.projections.rebuild import check, rebuild
from session_ledger.projections.sql import LIVE_COLUMNS
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger
from tests.integration.test_rebuild import write_a_bit_of_everything
from tests.unit.test_window_matches_llamaindex import as_llamaindex, llamaindex_window

OLD_COLUMNS = (
    "session_id, message_id, valid_from, valid_to, status, role, tokens, tokens_joined, message"
)
NEW_COLUMNS = LIVE_COLUMNS.split(", ")


def old_layout(types: dict[str, str], suffix: str) -> tuple[str, ...]:
    """The statements that put the store's message rows back into the old single table."""
    t = types
    return (
        f"CREATE TABLE old_messages (session_id {t['id']} NOT NULL, message_id {t['int']}"
        f" NOT NULL, valid_from {t['int']} NOT NULL, valid_to {t['int']}, status {t['text']}"
        f" NOT NULL, role {t['text']} NOT NULL, tokens integer NOT NULL, tokens_joined integer"
        f" NOT NULL, message {t['text']} NOT NULL, PRIMARY KEY (session_id, message_id,"
        f" valid_from)){suffix}",
        f"INSERT INTO old_messages ({OLD_COLUMNS}) SELECT session_id, message_id, valid_from,"
        " NULL, status, role, tokens, tokens_joined, message FROM ledger_messages",
        f"INSERT INTO old_messages ({OLD_COLUMNS}) SELECT {OLD_COLUMNS} FROM ledger_ended_messages",
        "DROP TABLE ledger_messages",
        "DROP TABLE ledger_ended_messages",
        "DROP TABLE ledger_schema",  # stores made before migrations were numbered
        "ALTER TABLE old_messages RENAME TO ledger_messages",
        "CREATE INDEX ledger_messages_live ON ledger_messages (session_id, status, message_id)"
        " WHERE valid_to IS NULL",
        "CREATE INDEX ledger_messages_ended ON ledger_messages (session_id, valid_to)"
        " WHERE valid_to IS NOT NULL",
    )


SQLITE_TYPES = {"id": "TEXT", "int": "INTEGER", "text": "TEXT"}
POSTGRES_TYPES = {"id": "uuid", "int": "bigint", "text": "text"}


def downgrade(store: str, url: str) -> None:
    if store == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            for statement in old_layout(SQLITE_TYPES, " WITHOUT ROWID"):
                conn.execute(statement)
        return
    with psycopg.connect(url, autocommit=True) as conn:
        for statement in old_layout(POSTGRES_TYPES, ""):
            conn.execute(statement)
        conn.execute(
            "ALTER TABLE ledger_messages RENAME CONSTRAINT old_messages_pkey"
            " TO ledger_messages_pkey"
        )


def layout(store: str, url: str) -> tuple[list[str], set[str]]:
    """The live table's columns, and the names of the message tables and their indexes."""
    if store == "sqlite":
        with sqlite3.connect(url.removeprefix("sqlite:///")) as conn:
            columns = [r[1] for r in conn.execute("PRAGMA table_info(ledger_messages)")]
            names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master")}
    else:
        with psycopg.connect(url) as conn:
            columns = [
                r[0]
                for r in conn.execute(
                    "SELECT column_name FROM information_schema.columns WHERE table_name ="
                    " 'ledger_messages' AND table_schema = current_schema()"
                    " ORDER BY ordinal_position"
                )
            ]
            names = {r[0] for r in conn.execute("SELECT relname FROM pg_class")}
    return columns, {n for n in names if "messages" in n and not n.startswith("sqlite_")}


def reads(ledger: Ledger, keys: list[str]) -> list[object]:
    """Everything a reader sees: heads, histories, windows and audit, now and at each
    past version."""
    seen: list[object] = []
    for k in keys:
        head = ledger.head(k)
        seen.append((head, ledger.history(k).json(), ledger.history(k, status="archived").json()))
        seen.append((ledger.get(k, token_limit=5), list(ledger.audit(k))))
        for v in range(1, head.version + 1):
            seen.append(
                (
                    ledger.get_all(k, as_of_version=v),
                    ledger.get_all(k, as_of_version=v, status="archived"),
                    ledger.get(k, token_limit=3, as_of_version=v),
                )
            )
    return seen


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_migrate_moves_ended_rows_to_their_own_table(
    store: str, own_store_settings: Settings
) -> None:
    settings = own_store_settings  # the test alters the tables
    url = settings.database_url
    ledger = make_ledger(settings)
    write_a_bit_of_everything(ledger, "a")  # ends with a reset: live rows started afresh
    ledger.put_messages("b", [{"role": "user", "content": f"m {i}"} for i in range(6)])
    ledger.delete_message("b", 2)
    ledger.archive_oldest("b", 2)  # live: archived and active rows; ended: three
    ledger.set("b", [*ledger.get_all("b")[:2], {"role": "user", "content": "replaced"}])
    keys = ["a", "b"]
    before = reads(ledger, keys)
    ledger.close()

    downgrade(store, url)
    old_columns, old_names = layout(store, url)
    assert "valid_to" in old_columns and "ledger_messages_live" in old_names
    with pytest.raises(StoreNotReady, match="older layout: run `session-ledger migrate`"):
        open_ledger(settings)  # refused, not opened to fail at its first write
    migrate(settings)
    columns, names = layout(store, url)
    assert columns == NEW_COLUMNS
    assert {"ledger_messages_live", "ledger_messages_ended", "ledger_messages_moved"}.isdisjoint(
        names
    )
    assert {"ledger_messages", "ledger_ended_messages", "ledger_ended_messages_at"} <= names

    ledger = make_ledger(settings)  # migrate again: a second run changes nothing
    assert reads(ledger, keys) == before
    views = ledger.views
    assert isinstance(views, SQLViews)
    # The rows stored before their mark (`open_end`) was have none until `rebuild`.
    differences = check(views, ledger.mapper, ledger.tokenizer)
    assert differences and all(d.startswith("ledger_") and "messages:" in d for d in differences)
    rebuild(views, ledger.mapper, ledger.tokenizer)
    assert check(views, ledger.mapper, ledger.tokenizer) == []
    assert reads(ledger, keys) == before

    ledger.delete_message("b", 0)  # writes go on, into the new tables
    ledger.put("b", {"role": "user", "content": "after the move"})
    assert [m.content for m in ledger.get_all("b")] == ["m 4", "replaced", "after the move"]
    assert [m.content for m in ledger.get_all("b", status="archived")] == ["m 0", "m 1"]
    assert check(views, ledger.mapper, ledger.tokenizer) == []
    ledger.close()


EDGED = ["Hi\n", "\nthere", "", "y", "\t\t", "\t\t", "ok.\n", " ", "a\n", "b"]


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_rows_stored_before_their_whitespace_mark_are_counted_from_their_text(
    store: str, own_store_settings: Settings
) -> None:
    """Rows a store held before `open_end` was added (NULL) give the windows
    ChatMemoryBuffer gives, at every version and limit; `rebuild` marks them."""
    settings = own_store_settings
    settings.tokenizer = "cl100k_base"
    ledger = make_ledger(settings)
    for text in EDGED:
        ledger.put("w", {"role": "user", "content": text})
    encode = load_tokenizer("cl100k_base").encode

    def windows() -> list[list[dict[str, object]]]:
        got = []
        for version in range(2, len(EDGED) + 2):
            history = [{"role": "user", "content": t} for t in EDGED[: version - 1]]
            for limit in range(1, 12):
                window = ledger.get("w", token_limit=limit, as_of_version=version)
                assert as_llamaindex(window) == llamaindex_window(history, limit, 0, encode)
                got.append(as_llamaindex(window))
        return got

    marked = windows()
    statement = "UPDATE ledger_messages SET open_end = NULL"
    if store == "sqlite":
        with sqlite3.connect(settings.database_url.removeprefix("sqlite:///")) as conn:
            conn.execute(statement)
    else:
        with psycopg.connect(settings.database_url, autocommit=True) as conn:
            conn.execute(statement)
    assert windows() == marked
    views = ledger.views
    assert isinstance(views, SQLViews)
    assert check(views, ledger.mapper, ledger.tokenizer)  # not marked: a difference
    rebuild(views, ledger.mapper, ledger.tokenizer)
    assert check(views, ledger.mapper, ledger.tokenizer) == []
    assert windows() == marked
    ledger.close()
