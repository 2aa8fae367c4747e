"""PostgreSQL context reads on the event loop (projections/async_bridge.py and
postgres_async.py), against a real server: the same read code gives the same answer on
the loop as in a thread, through the loop's own pool; the loop runs other tasks while a
read waits on the server; a failed, cancelled or starved read says so with the error a
thread's read raises, and gives its connection back."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
from eventsourcing.persistence import ProgrammingError
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.domain.errors import StoreUnavailable
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.projections.async_bridge import bridged
from session_ledger.projections.postgres import PostgresLedgerRecorder
from tests.conftest import make_ledger, make_settings, ticking

T = TypeVar("T")
MESSAGE = {"messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def small_pool(tmp_path: Path) -> Iterator[Ledger]:
    """A PostgreSQL ledger with one connection per pool and a one-second wait for one."""
    ledger = make_ledger(make_settings("postgres", tmp_path, pool_size=1, store_wait_seconds=1))
    yield ledger
    ledger.close()


def recorder(ledger: Ledger) -> PostgresLedgerRecorder:
    recorder = ledger.recorder
    assert isinstance(recorder, PostgresLedgerRecorder)
    return recorder


def in_a_loop(ledger: Ledger, main: Callable[[], Awaitable[T]]) -> T:
    """`main()` run in a new event loop, whose pool of the ledger is closed before the
    loop ends, as the server's lifespan closes it."""

    async def run() -> T:
        try:
            return await main()
        finally:
            await bridged(recorder(ledger).loop_pool.close)

    return asyncio.run(run())


def run_on_loop(ledger: Ledger, sql: str) -> list[Any]:
    """`sql` on a connection of the loop's pool (to be run under `bridged`)."""
    with recorder(ledger).loop_pool.connection() as conn, conn.cursor() as cursor:
        cursor.execute(sql)
        return cursor.fetchall()


def reads(ledger: Ledger) -> list[tuple[int, str]]:
    """Windows of several sizes now and at version 90, and the history: (version, JSON)."""
    answers = [ledger.window("chat", token_limit=limit) for limit in (5, 300, 900, 5000)]
    answers.append(ledger.window("chat", token_limit=400, as_of_version=90))
    answers.append(ledger.history("chat"))
    return [(a.version, a.json()) for a in answers]


def test_a_read_on_the_loop_is_the_read_in_a_thread(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("postgres", tmp_path))
    try:
        for i in range(160):  # past the first batch of rows a window read takes (64)
            role = "user" if i % 3 else "assistant"
            ledger.put("chat", ChatMessage.text(role, f"turn {i} " + "word " * (i % 9)))
        threads = recorder(ledger).datastore.pool
        asked = threads.get_stats().get("requests_num", 0)

        async def main() -> tuple[list[tuple[int, str]], int]:
            answers = await bridged(lambda: reads(ledger))
            # Its connections are set up as the blocking pool's: rows as dicts, the
            # planner settings that keep the window's plan (postgres.PLANNER_SETTINGS).
            shown = await bridged(lambda: run_on_loop(ledger, "SHOW enable_bitmapscan"))
            assert shown == [{"enable_bitmapscan": "off"}]
            loop_pool = recorder(ledger).loop_pool.pool
            assert loop_pool is not None
            return answers, loop_pool.get_stats()["requests_num"]

        on_loop, asked_of_loop_pool = in_a_loop(ledger, main)
        assert threads.get_stats().get("requests_num", 0) == asked  # not one of its
        assert asked_of_loop_pool >= 7
        assert on_loop == reads(ledger)  # the same reads in this thread
        assert {v for v, _ in on_loop} == {ledger.head("chat").version, 90}
    finally:
        ledger.close()


def test_the_loop_runs_other_tasks_while_a_read_waits_on_the_server(small_pool: Ledger) -> None:
    async def main() -> int:
        async with ticking(0.01) as ticks:
            await bridged(lambda: run_on_loop(small_pool, "SELECT pg_sleep(0.3)"))
        return len(ticks)

    assert in_a_loop(small_pool, main) >= 5  # a blocking read would have let it tick once


def test_a_failed_or_cancelled_read_gives_its_only_connection_back(small_pool: Ledger) -> None:
    small_pool.put("chat", ChatMessage.text("user", "hello"))

    async def main() -> int:
        with pytest.raises(ProgrammingError, match="no_such_column"):  # the library's type
            await bridged(lambda: run_on_loop(small_pool, "SELECT no_such_column"))
        sleeping = asyncio.create_task(
            bridged(lambda: run_on_loop(small_pool, "SELECT pg_sleep(30)"))
        )
        await asyncio.sleep(0.3)
        sleeping.cancel()
        with pytest.raises(asyncio.CancelledError):
            await sleeping
        # One connection in the pool: this read waits for it unless both gave it back.
        return (await bridged(lambda: small_pool.window("chat"))).version

    assert in_a_loop(small_pool, main) == small_pool.head("chat").version


def test_no_connection_within_the_wait_is_store_unavailable(small_pool: Ledger) -> None:
    async def main() -> None:
        holder = asyncio.create_task(bridged(lambda: run_on_loop(small_pool, "SELECT pg_sleep(3)")))
        await asyncio.sleep(0.3)
        with pytest.raises(StoreUnavailable, match="no PostgreSQL connection"):
            await bridged(lambda: small_pool.window("chat"))
        await holder

    in_a_loop(small_pool, main)


def test_closing_the_ledger_on_the_loop_closes_its_pool(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("postgres", tmp_path))

    async def main() -> Any:
        await bridged(lambda: ledger.window("chat"))
        pool = recorder(ledger).loop_pool.pool
        await bridged(ledger.close)
        return pool

    pool = asyncio.run(main())
    assert pool is not None and pool.closed
    assert recorder(ledger).loop_pool.pool is None


def test_the_api_reads_context_on_the_loop_only_with_a_postgres_ledger_of_its_own(
    tmp_path: Path,
) -> None:
    keys = MemoryKeyStore()
    _, secret = keys.create(f"t-{uuid.uuid4().hex[:12]}", "agent")
    for store, expected in (("postgres", True), ("sqlite", False)):
        settings = make_settings(store, tmp_path)
        make_ledger(settings).close()
        app = create_app(settings, key_store=keys)
        with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
            assert app.state.store_bridged is expected
            assert client.get("/v1/sessions/no-such-session/context").status_code == 404
            assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
            answer = client.get("/v1/sessions/chat/context")
            assert answer.status_code == 200, answer.text
            assert "hello" in answer.text and answer.headers["etag"] == '"2"'
    handed_in = make_ledger(make_settings("postgres", tmp_path))
    try:
        app = create_app(make_settings("postgres", tmp_path), ledger=handed_in)
        assert app.state.store_bridged is False  # it may outlive the app's loop
    finally:
        handed_in.close()


def test_the_server_closes_its_loop_pool_even_when_shutting_down_fails(tmp_path: Path) -> None:
    keys = MemoryKeyStore()
    _, secret = keys.create(f"t-{uuid.uuid4().hex[:12]}", "agent")
    settings = make_settings("postgres", tmp_path)
    make_ledger(settings).close()  # the tables
    app = create_app(settings)
    client = TestClient(app, headers={"Authorization": f"Bearer {secret}"})
    with pytest.raises(OSError, match="key store"), client:
        app.state.key_store.close()  # the app's own: swapped for one that knows the agent
        app.state.key_store = keys

        def broken_close() -> None:
            raise OSError("the key store would not close")

        keys.close = broken_close  # type: ignore[method-assign]
        assert client.get("/v1/sessions/no-such-session/context").status_code == 404
        views = recorder(app.state.ledger)
        assert views.loop_pool.pool is not None  # the read above opened it
    assert views.loop_pool.pool is None


def test_a_second_running_loop_is_refused_and_a_later_one_served(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("postgres", tmp_path))
    ledger.put("chat", ChatMessage.text("user", "hello"))
    try:

        async def read_in_another_loop() -> None:
            with pytest.raises(RuntimeError, match="one running event loop"):
                # The first loop still runs (it waits for this thread).
                await bridged(lambda: ledger.window("chat"))

        async def first() -> None:
            await bridged(lambda: ledger.window("chat"))
            await asyncio.to_thread(asyncio.run, read_in_another_loop())

        in_a_loop(ledger, first)

        async def later() -> int:
            return (await bridged(lambda: ledger.window("chat"))).version

        assert in_a_loop(ledger, later) == ledger.head("chat").version
    finally:
        ledger.close()
