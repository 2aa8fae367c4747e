"""PostgreSQL store calls on the event loop (a context read, a write alone): psycopg's
asyncio connections behind the blocking calls the store's code makes, each awaited
through `async_bridge.wait_for`.

The store's code takes `with conn.cursor() as curs: curs.execute(...)` from
`PostgresDialect.connection()`, and the library's recorders (a session's events
and snapshots) from their datastore's `get_connection()`. The factory's datastore is a
`BridgingDatastore`: under `async_bridge.bridged` its connection is a `BridgedConnection`
of its `LoopPool`, the same calls, each one a psycopg coroutine awaited by the loop. So
one code serves a worker thread and the loop.

The `LoopPool` is psycopg's `AsyncConnectionPool`, made as the library's own pool is (the
same connection arguments and wait; at most as many connections as that pool keeps open,
LEDGER_POOL_SIZE), each connection in autocommit with the ledger's planner settings. It
is made and opened on first use, in the loop that uses it, and closed by the ledger's
`close()` run under `bridged` in that loop (`api/app.py`'s lifespan). It must be: a pool
still open when its loop ends keeps `asyncio.run` waiting on its cancelled tasks.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import psycopg
from eventsourcing.postgres import PostgresDatastore
from psycopg import AsyncConnection, AsyncCursor
from psycopg.types.composite import register_composite
from psycopg_pool import AsyncConnectionPool, ConnectionPool, PoolTimeout

from .async_bridge import in_bridge, wait_for
from .driver_errors import POSTGRES


class BridgedCursor:
    """A psycopg `AsyncCursor` used as a blocking cursor under `bridged`."""

    __slots__ = ("_cursor",)

    def __init__(self, cursor: AsyncCursor[Any]) -> None:
        self._cursor = cursor

    @property
    def row_factory(self) -> Any:
        return self._cursor.row_factory

    @row_factory.setter
    def row_factory(self, factory: Any) -> None:
        self._cursor.row_factory = factory

    def execute(self, query: Any, params: Sequence[Any] | None = None, **kwargs: Any) -> None:
        wait_for(self._cursor.execute(query, params, **kwargs))

    def fetchall(self) -> list[Any]:
        return wait_for(self._cursor.fetchall())

    def fetchone(self) -> Any:
        return wait_for(self._cursor.fetchone())

    def __enter__(self) -> BridgedCursor:
        return self

    def __exit__(self, *exc: object) -> None:
        wait_for(self._cursor.close())


class BridgedConnection:
    """A psycopg `AsyncConnection` used as a blocking connection under `bridged`."""

    __slots__ = ("_conn",)

    def __init__(self, conn: AsyncConnection[Any]) -> None:
        self._conn = conn

    @property
    def adapters(self) -> Any:  # with `connection`: where the library registers its types
        return self._conn.adapters

    @property
    def connection(self) -> AsyncConnection[Any]:
        return self._conn

    @property
    def autocommit(self) -> bool:
        return self._conn.autocommit

    def cursor(self, **kwargs: Any) -> BridgedCursor:
        return BridgedCursor(self._conn.cursor(**kwargs))

    @contextmanager
    def transaction(self, **kwargs: Any) -> Iterator[None]:
        block = self._conn.transaction(**kwargs)
        wait_for(block.__aenter__())
        try:
            yield
        except BaseException as exc:
            if not wait_for(block.__aexit__(type(exc), exc, exc.__traceback__)):
                raise
        else:
            wait_for(block.__aexit__(None, None, None))


class LoopPool:
    """The event loop's connections to the database of `pool` (see the module's doc)."""

    def __init__(self, pool: ConnectionPool[Any], setup: str) -> None:
        self._like = pool
        self._setup = setup
        self._pool: AsyncConnectionPool[Any] | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    @contextmanager
    def connection(self) -> Iterator[BridgedConnection]:
        """A pooled connection for as long as the block runs (under `bridged`); psycopg's
        errors raised as the library's, no connection within the wait as StoreUnavailable."""
        try:
            pool = self._opened()
            conn = wait_for(pool.getconn())
        except PoolTimeout as exc:
            raise POSTGRES.store(exc) from exc
        try:
            yield BridgedConnection(conn)
        except psycopg.Error as exc:
            # As the library's pool raises them for a blocking connection (its
            # PostgresDatastore.get_connection): callers catch the same types.
            raise POSTGRES.library(exc) from exc
        finally:
            wait_for(pool.putconn(conn))

    @property
    def pool(self) -> AsyncConnectionPool[Any] | None:
        """psycopg's pool, once a read on the loop made it."""
        return self._pool

    def _opened(self) -> AsyncConnectionPool[Any]:
        loop = asyncio.get_running_loop()
        if self._loop is not None and self._loop is not loop:
            # A pool serves the loop that made it, and must close in it (see the module's
            # doc). Once that loop has ended, a new one gets a pool of its own.
            if not self._loop.is_closed():
                raise RuntimeError("a ledger reads on one running event loop at a time")
            self._pool = self._loop = None
        if self._pool is None:
            setup, kwargs = self._setup, self._like.kwargs
            assert isinstance(kwargs, dict), "the library's pool connects with fixed arguments"

            async def configure(conn: AsyncConnection[Any]) -> None:
                await conn.set_autocommit(True)
                await conn.execute(setup)

            self._pool = AsyncConnectionPool(
                self._like.conninfo, kwargs=dict(kwargs), min_size=1,
                max_size=self._like.max_size, timeout=self._like.timeout,
                configure=configure, open=False,
            )  # fmt: skip
            self._loop = loop
            wait_for(self._pool.open())
        return self._pool

    def close(self) -> None:
        """Close the pool (under `bridged`, in its loop). Elsewhere, or once its loop has
        ended, only let it go: its connections close as it is collected."""
        pool, loop = self._pool, self._loop
        self._pool = self._loop = None
        if pool is not None and loop is not None and not loop.is_closed() and in_bridge():
            wait_for(pool.close())


class BridgingDatastore:
    """The library's `PostgresDatastore`, whose connections under `bridged` come from its
    `LoopPool`: so what the library's own recorders do within a call the loop runs (load
    a session's events or snapshot, store a snapshot) waits on the loop too. Everything
    else is the datastore's own."""

    def __init__(self, datastore: PostgresDatastore, setup: str) -> None:
        self.datastore = datastore
        self.loop_pool = LoopPool(datastore.pool, setup)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.datastore, name)

    @contextmanager
    def get_connection(self) -> Iterator[Any]:
        if not in_bridge():
            with self.datastore.get_connection() as conn:
                yield conn
            return
        with self.loop_pool.connection() as conn:
            for info in self.datastore.psycopg_type_adapters.values():  # as the library's
                if not conn.adapters.types.get(info.oid):
                    register_composite(info, conn)
            yield conn

    @contextmanager
    def transaction(self, *, commit: bool = False) -> Iterator[Any]:
        with self.get_connection() as conn, conn.transaction(force_rollback=not commit):
            yield conn.cursor()
