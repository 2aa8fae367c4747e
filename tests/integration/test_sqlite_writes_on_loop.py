"""A SQLite write alone on the event loop (`deps.short_write`) never waits there for
another writer: one that finds the writers' turn or SQLite's lock held (another server
worker, a command run beside the server, a tool) stores nothing on the loop and goes to
a worker thread, which waits; the server answers other requests meanwhile. On the loop,
such a wait of up to the lock timeout held every request of the process."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.projections.write_turns import (
    TurnNotFree,
    WriteTransaction,
    WriteTurns,
    lock_file_of,
    without_waiting,
)
from tests.conftest import make_ledger, make_settings, turn_held

MESSAGE = {"messages": [{"role": "user", "content": "hello"}]}


@contextlib.contextmanager
def sqlite_lock_held(db: Path) -> Iterator[contextlib.ExitStack]:
    """Another connection, which takes no turn (a tool), holds SQLite's write lock until
    the stack yielded is closed or the block ends."""
    other = sqlite3.connect(db, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    with contextlib.ExitStack() as release:
        release.callback(other.close)
        release.callback(other.execute, "ROLLBACK")
        yield release


@contextlib.contextmanager
def held(what: str, db: Path) -> Iterator[contextlib.ExitStack]:
    with contextlib.ExitStack() as release:
        if what == "turn":
            release.callback(release.enter_context(turn_held(db)).set)
        else:
            release.enter_context(sqlite_lock_held(db))
        yield release


@pytest.mark.parametrize(
    ("what", "key"),
    [("turn", "chat"), ("lock", "chat"), ("lock", "new")],  # new: its quota counted first
)
def test_a_write_alone_goes_to_a_thread_when_another_writer_holds_the_file(
    what: str, key: str, tmp_path: Path
) -> None:
    keys = MemoryKeyStore()
    _, secret = keys.create(f"t-{uuid.uuid4().hex[:12]}", "agent")
    settings = make_settings("sqlite", tmp_path, lock_timeout_seconds=3)
    make_ledger(settings).close()  # the tables
    app = create_app(settings, key_store=keys)
    headers = {"Authorization": f"Bearer {secret}"}
    with TestClient(app, headers=headers) as client:
        assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200

        async def meanwhile() -> tuple[bool, int, int]:
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                with held(what, tmp_path / "ledger.db") as release:
                    write = asyncio.create_task(
                        c.post(f"/v1/sessions/{key}/messages", json=MESSAGE, headers=headers)
                    )
                    await asyncio.sleep(0.2)  # the write has begun, and waits
                    health = await c.get("/healthz")  # answered while it waits
                    waiting = not write.done()
                    release.close()  # the other writer lets go
                    written = await write
            return waiting, health.status_code, written.status_code

        waiting, health, written = client.portal.call(meanwhile)
        assert (waiting, health, written) == (True, 200, 200)
        assert client.get(f"/v1/sessions/{key}").json()["message_count"] == 2 - (key == "new")


@pytest.mark.parametrize("what", ["turn", "lock"])
def test_a_transaction_that_may_not_wait_stores_nothing_and_lets_everything_go(
    what: str, tmp_path: Path
) -> None:
    db = tmp_path / "ledger.db"
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    ledger.close()
    from eventsourcing.sqlite import SQLiteConnectionPool

    pool = SQLiteConnectionPool(db_name=str(db), lock_timeout=7, pool_size=1, max_overflow=0)
    turns = WriteTurns(lock_file_of(str(db)), timeout=5)
    refused = pytest.raises(TurnNotFree)
    with held(what, db), refused, without_waiting(), WriteTransaction(pool, turns) as c:
        c.execute("CREATE TABLE never (x)")
    with WriteTransaction(pool, turns) as c:  # the turn, the connection: all given back
        c.execute("PRAGMA busy_timeout")
        assert c.fetchone()[0] == 7000  # SQLite's wait as it was
        c.execute("SELECT count(*) FROM sqlite_master WHERE name = 'never'")
        assert c.fetchone()[0] == 0
    turns.close()
    pool.close()
