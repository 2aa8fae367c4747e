"""The floor of the HTTP path: a bare FastAPI app doing the least work session-ledger's
two hot requests could do on the same stack (uvicorn, FastAPI, the same store).

- GET `/v1/sessions/{key}/context`: the bearer key looked up in a dict, then ONE indexed
  tail SELECT of the session's newest `FLOOR_WINDOW` stored message bodies, answered as
  `{"messages": [...]}` from those bytes.
- POST `/v1/sessions/{key}/messages`: the key looked up, the body parsed as JSON, ONE
  INSERT of its first message and a COMMIT (SQLite in WAL with synchronous=FULL, like the
  ledger's; PostgreSQL with its defaults).

Run by `bench.http_path` through uvicorn's factory: `uvicorn bench.http_floor:create_app
--factory`, configured by FLOOR_DATABASE_URL, FLOOR_API_KEY and FLOOR_WINDOW.
"""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

from fastapi import FastAPI, HTTPException, Request, Response

SQLITE_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS floor_messages (session TEXT NOT NULL, "
    "seq INTEGER PRIMARY KEY AUTOINCREMENT, body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS floor_messages_tail ON floor_messages (session, seq)",
)
POSTGRES_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS floor_messages (session TEXT NOT NULL, "
    "seq BIGSERIAL PRIMARY KEY, body TEXT NOT NULL)",
    "CREATE INDEX IF NOT EXISTS floor_messages_tail ON floor_messages (session, seq)",
)
TAIL = "SELECT body FROM floor_messages WHERE session = ? ORDER BY seq DESC LIMIT ?"
INSERT = "INSERT INTO floor_messages (session, body) VALUES (?, ?)"


class SQLiteFloor:
    """A connection per thread, WAL, synchronous=FULL, a long busy timeout."""

    def __init__(self, url: str) -> None:
        self.path = url.removeprefix("sqlite:///")
        self.local = threading.local()

    def conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self.local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=60)
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            self.local.conn = conn
        return conn

    def migrate(self) -> None:
        for statement in SQLITE_SCHEMA:
            self.conn().execute(statement)

    def tail(self, session: str, limit: int) -> list[str]:
        return [r[0] for r in self.conn().execute(TAIL, (session, limit))]

    def insert(self, session: str, body: str) -> None:
        self.conn().execute(INSERT, (session, body))  # autocommit: its own COMMIT

    def insert_many(self, session: str, bodies: list[str]) -> None:
        conn = self.conn()
        conn.execute("BEGIN")
        conn.executemany(INSERT, [(session, b) for b in bodies])
        conn.execute("COMMIT")

    def close(self) -> None:
        return None


class PostgresFloor:
    """A psycopg pool; each statement in autocommit."""

    def __init__(self, url: str) -> None:
        from psycopg_pool import ConnectionPool

        self.pool = ConnectionPool(url, min_size=4, max_size=40, open=True,
                                   kwargs={"autocommit": True})  # fmt: skip

    @contextmanager
    def _cursor(self) -> Iterator[Any]:
        with self.pool.connection() as conn, conn.cursor() as cur:
            yield cur

    def migrate(self) -> None:
        with self._cursor() as cur:
            for statement in POSTGRES_SCHEMA:
                cur.execute(statement)

    def tail(self, session: str, limit: int) -> list[str]:
        with self._cursor() as cur:
            cur.execute(TAIL.replace("?", "%s"), (session, limit), prepare=True)
            return [r[0] for r in cur.fetchall()]

    def insert(self, session: str, body: str) -> None:
        with self._cursor() as cur:
            cur.execute(INSERT.replace("?", "%s"), (session, body), prepare=True)

    def insert_many(self, session: str, bodies: list[str]) -> None:
        with self.pool.connection() as conn, conn.transaction(), conn.cursor() as cur:
            cur.executemany(INSERT.replace("?", "%s"), [(session, b) for b in bodies])

    def close(self) -> None:
        self.pool.close()


def open_floor(url: str) -> SQLiteFloor | PostgresFloor:
    return SQLiteFloor(url) if url.startswith("sqlite:") else PostgresFloor(url)


def create_app() -> FastAPI:
    url = os.environ["FLOOR_DATABASE_URL"]
    keys = {os.environ["FLOOR_API_KEY"]: ("default", "agent")}
    window = int(os.environ.get("FLOOR_WINDOW", "50"))
    state: dict[str, Any] = {}

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state["store"] = open_floor(url)
        yield
        state["store"].close()

    app = FastAPI(lifespan=lifespan)

    def caller(request: Request) -> tuple[str, str]:
        found = keys.get(request.headers.get("authorization", "").removeprefix("Bearer "))
        if found is None:
            raise HTTPException(401, "unknown key")
        return found

    @app.get("/v1/sessions/{key}/context")
    def context(key: str, request: Request) -> Response:
        caller(request)
        bodies = state["store"].tail(key, window)
        bodies.reverse()
        return Response(('{"messages":[' + ",".join(bodies) + "]}").encode(),
                        media_type="application/json")  # fmt: skip

    @app.post("/v1/sessions/{key}/messages")
    def append(key: str, request: Request, body: dict[str, Any]) -> dict[str, int]:
        caller(request)
        state["store"].insert(key, json.dumps(body["messages"][0]))
        return {"version": 1}

    return app
