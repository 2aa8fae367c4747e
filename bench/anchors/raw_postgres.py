"""Raw psycopg: INSERT + COMMIT per message, the floor for PostgreSQL (own schema)."""

from __future__ import annotations

import copy
import json
from typing import Any

import psycopg

from ..corpus import Message
from ..stores import Context, Store

SCHEMA = "bench_raw"


class RawPostgres(Store):
    name = "raw psycopg INSERT+COMMIT"
    group = "raw"
    backend = "postgres"

    def open(self, ctx: Context) -> None:
        assert ctx.postgres_url is not None
        self.url = ctx.postgres_url
        self.window_rows = ctx.window_rows
        self.conn = self._connect()
        with self.conn.cursor() as cur:
            cur.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
            cur.execute(f"CREATE SCHEMA {SCHEMA}")
            cur.execute(
                f"CREATE TABLE {SCHEMA}.messages (id BIGSERIAL PRIMARY KEY,"
                " session TEXT NOT NULL, data TEXT NOT NULL)"
            )
            cur.execute(f"CREATE INDEX ON {SCHEMA}.messages (session, id)")
        self.conn.commit()

    def _connect(self) -> psycopg.Connection[Any]:
        return psycopg.connect(self.url)

    def append(self, session: str, message: Message) -> None:
        self.conn.execute(
            f"INSERT INTO {SCHEMA}.messages (session, data) VALUES (%s, %s)",
            (session, json.dumps(message)),
        )
        self.conn.commit()

    def writer(self) -> RawPostgres:
        handle = copy.copy(self)
        handle.conn = self._connect()
        return handle

    def release_writer(self, writer: Store) -> None:
        assert isinstance(writer, RawPostgres)
        writer.conn.close()

    def load(self, session: str, messages: list[Any]) -> None:
        with self.conn.cursor() as cur:
            cur.executemany(
                f"INSERT INTO {SCHEMA}.messages (session, data) VALUES (%s, %s)",
                [(session, json.dumps(m)) for m in messages],
            )
        self.conn.commit()

    def window(self, session: str) -> int:
        rows = self.conn.execute(
            f"SELECT data FROM {SCHEMA}.messages WHERE session = %s ORDER BY id DESC LIMIT %s",
            (session, self.window_rows),
        ).fetchall()
        self.conn.commit()
        return len([json.loads(r[0]) for r in reversed(rows)])

    def history(self, session: str) -> int:
        rows = self.conn.execute(
            f"SELECT data FROM {SCHEMA}.messages WHERE session = %s ORDER BY id", (session,)
        ).fetchall()
        self.conn.commit()
        return len([json.loads(r[0]) for r in rows])

    def close(self) -> None:
        self.conn.execute(f"DROP SCHEMA IF EXISTS {SCHEMA} CASCADE")
        self.conn.commit()
        self.conn.close()
