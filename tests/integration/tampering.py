"""Editing a store behind the ledger's back, as whoever holds the database could: the
tamperings the checkpoint tests must catch, on SQLite and PostgreSQL alike."""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import psycopg
from psycopg.rows import dict_row

from session_ledger.api.settings import Settings
from session_ledger.domain.integrity import chain_hashes
from session_ledger.domain.session import session_id

SESSION_TABLES = ("ledger_events", "ledger_timeline", "ledger_sessions")


class Database:
    """Plain SQL on the ledger's tables, with `?` placeholders on both backends, on one
    connection of its own that does not wait for the disk (a test's tampering need not
    survive a crash). `run` commits each statement unless inside `together`."""

    def __init__(self, settings: Settings) -> None:
        self.tenant = settings.default_tenant
        self.url = settings.database_url
        self.postgres = self.url.startswith("postgresql")
        self.conn: Any = None
        self.grouped = False

    def _connection(self) -> Any:
        if self.conn is None:
            if self.postgres:
                self.conn = psycopg.connect(self.url, row_factory=dict_row)
                self.conn.execute("SET synchronous_commit = off")
            else:
                self.conn = sqlite3.connect(self.url.removeprefix("sqlite:///"))
                self.conn.row_factory = sqlite3.Row
                self.conn.execute("PRAGMA synchronous = OFF")
        return self.conn

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()

    @contextmanager
    def together(self) -> Iterator[None]:
        """The statements run inside as one transaction."""
        self.grouped = True
        try:
            yield
            self._connection().commit()
        finally:
            self.grouped = False

    def run(self, sql: str, *params: Any) -> list[dict[str, Any]]:
        conn = self._connection()
        c = conn.cursor()
        c.execute(sql.replace("?", "%s") if self.postgres else sql, params)
        rows = c.fetchall() if c.description else []
        if not self.grouped:
            conn.commit()
        return [dict(r) for r in rows]

    def sid(self, key: str) -> Any:
        sid = session_id(self.tenant, key)
        return sid if self.postgres else sid.hex

    # -- the records of a session -----------------------------------------------------------

    def events(self, key: str) -> list[dict[str, Any]]:
        return self.run(
            "SELECT originator_version AS version, topic, state FROM ledger_events "
            "WHERE originator_id = ? ORDER BY originator_version",
            self.sid(key),
        )

    def set_state(self, key: str, version: int, state: bytes, topic: str | None = None) -> None:
        self.run("UPDATE ledger_events SET state = ?, topic = coalesce(?, topic) "
                 "WHERE originator_id = ? AND originator_version = ?",
                 state, topic, self.sid(key), version)  # fmt: skip

    def delete_event(self, key: str, version: int) -> None:
        self.run("DELETE FROM ledger_events WHERE originator_id = ? AND originator_version = ?",
                 self.sid(key), version)  # fmt: skip

    def truncate(self, key: str, keep: int) -> None:
        """Roll the session back to version `keep`: its events and timeline rows after it
        go, so what is left is a valid chain of its own."""
        self.run("DELETE FROM ledger_events WHERE originator_id = ? AND originator_version > ?",
                 self.sid(key), keep)  # fmt: skip
        self.run("DELETE FROM ledger_timeline WHERE session_id = ? AND version > ?",
                 self.sid(key), keep)  # fmt: skip

    def recompute_chain(self, key: str) -> None:
        """Store the chain the (altered) events give, as a careful forger would."""
        sid = session_id(self.tenant, key)
        records = [(e["version"], e["topic"], bytes(e["state"])) for e in self.events(key)]
        for (version, _, _), h in zip(records, chain_hashes(sid, records), strict=True):
            self.run("UPDATE ledger_timeline SET chain = ? WHERE session_id = ? AND version = ?",
                     h, self.sid(key), version)  # fmt: skip

    def set_stored_hash(self, key: str, version: int, value: bytes) -> None:
        self.run("UPDATE ledger_timeline SET chain = ? WHERE session_id = ? AND version = ?",
                 value, self.sid(key), version)  # fmt: skip

    def delete_session(self, key: str) -> None:
        for table, column in (("ledger_events", "originator_id"), ("ledger_timeline", "session_id"),
                              ("ledger_messages", "session_id"),
                              ("ledger_ended_messages", "session_id"),
                              ("ledger_sessions", "session_id")):  # fmt: skip
            self.run(f"DELETE FROM {table} WHERE {column} = ?", self.sid(key))

    # -- putting a session back -------------------------------------------------------------

    def save(self, key: str) -> dict[str, list[dict[str, Any]]]:
        """The rows of a session that the tamperings touch, to `restore` them."""
        column = {"ledger_events": "originator_id"}
        return {t: self.run(f"SELECT * FROM {t} WHERE {column.get(t, 'session_id')} = ?",
                            self.sid(key)) for t in SESSION_TABLES}  # fmt: skip

    def restore(self, key: str, saved: dict[str, list[dict[str, Any]]]) -> None:
        with self.together():
            self._put_back(key, saved)

    def _put_back(self, key: str, saved: dict[str, list[dict[str, Any]]]) -> None:
        column = {"ledger_events": "originator_id"}
        for table in SESSION_TABLES:
            self.run(f"DELETE FROM {table} WHERE {column.get(table, 'session_id')} = ?",
                     self.sid(key))  # fmt: skip
        for table in reversed(SESSION_TABLES):
            for row in saved[table]:
                names = ", ".join(row)
                marks = ", ".join("?" for _ in row)
                self.run(f"INSERT INTO {table} ({names}) VALUES ({marks})", *row.values())


def flip(data: bytes, at: int, mask: int) -> bytes:
    """`data` with byte `at` XORed with `mask` (1-255): always a different byte."""
    assert 1 <= mask <= 255
    return data[:at] + bytes([data[at] ^ mask]) + data[at + 1 :]
