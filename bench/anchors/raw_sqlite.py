"""Raw sqlite3 (WAL, synchronous=FULL): INSERT + commit per message, the floor for SQLite."""

from __future__ import annotations

import copy
import json
import sqlite3
from typing import Any

from ..corpus import Message
from ..stores import Context, Store

_SCHEMA = """
CREATE TABLE IF NOT EXISTS messages (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    session TEXT NOT NULL,
    data TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS messages_session_id ON messages (session, id);
"""


class RawSQLite(Store):
    name = "raw sqlite3 WAL+FULL"
    group = "raw"
    backend = "sqlite"

    def open(self, ctx: Context) -> None:
        self.path = ctx.workdir / "raw-sqlite3.db"
        self.window_rows = ctx.window_rows
        self.conn = self._connect()
        self.conn.executescript(_SCHEMA)

    def _connect(self) -> sqlite3.Connection:
        conn = sqlite3.connect(self.path, check_same_thread=False, timeout=60)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        return conn

    def append(self, session: str, message: Message) -> None:
        self.conn.execute(
            "INSERT INTO messages (session, data) VALUES (?, ?)", (session, json.dumps(message))
        )
        self.conn.commit()

    def writer(self) -> RawSQLite:
        handle = copy.copy(self)
        handle.conn = self._connect()
        return handle

    def release_writer(self, writer: Store) -> None:
        assert isinstance(writer, RawSQLite)
        writer.conn.close()

    def load(self, session: str, messages: list[Any]) -> None:
        self.conn.executemany(
            "INSERT INTO messages (session, data) VALUES (?, ?)",
            [(session, json.dumps(m)) for m in messages],
        )
        self.conn.commit()

    def window(self, session: str) -> int:
        rows = self.conn.execute(
            "SELECT data FROM messages WHERE session = ? ORDER BY id DESC LIMIT ?",
            (session, self.window_rows),
        ).fetchall()
        return len([json.loads(r[0]) for r in reversed(rows)])

    def history(self, session: str) -> int:
        rows = self.conn.execute(
            "SELECT data FROM messages WHERE session = ? ORDER BY id", (session,)
        ).fetchall()
        return len([json.loads(r[0]) for r in rows])

    def close(self) -> None:
        self.conn.close()
