"""Each dialect's connections of the tables beside the ledger's (API keys, rate limits):
`TableConnections` (dialect.py) on SQLite and on PostgreSQL, and PostgreSQL's listener
of a table's notices (`Notices`)."""

from __future__ import annotations

import contextlib
import logging
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import psycopg
from psycopg_pool import ConnectionPool

from session_ledger.domain.errors import StoreNotReady, StoreUnavailable

from .dialect import TableConnections
from .driver_errors import POSTGRES, SQLITE
from .postgres_append import to_psycopg
from .sqlite_files import create_private
from .write_turns import begin_immediate

RECONNECT_SECONDS = 1.0
POLL_SECONDS = 0.25  # how soon a listener sees close()

log = logging.getLogger(__name__)


class SQLiteTableConnections(TableConnections):
    """At most `size` connections to one SQLite file, each set up by `pragmas`, lent to
    one caller at a time and kept open for the next (opening one costs 0.4 ms, which
    every request would pay); a caller finding all lent waits for one, at most
    `lock_timeout` seconds (then StoreUnavailable). Calls are short (a read of one row,
    a bucket's update), so the wait is too. `not_ready`: what a table not made yet
    means (StoreNotReady).

    None is tied to a thread: worker threads come and go (AnyIO retires idle ones), and a
    connection kept per thread stayed open after its thread was gone. None is closed
    while the store is in use either: SQLite defers closing a file descriptor while
    another connection of the process holds a lock on the file (a POSIX close would drop
    that lock), and on a busy server one always does, so each connection closed then
    stayed open."""

    def __init__(
        self, path: str, lock_timeout: float, not_ready: str, pragmas: Sequence[str] = (),
        *, size: int = 8,
    ) -> None:  # fmt: skip
        self.path = path
        self.lock_timeout = lock_timeout
        self.not_ready = not_ready
        self.pragmas = tuple(pragmas)
        self.size = size
        self._free = threading.Semaphore(size)
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # close() moves it: a connection lent before is closed when given back.
        self._generation = 0

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection of this caller's alone until the block ends."""
        if not self._free.acquire(timeout=self.lock_timeout):
            raise StoreUnavailable(
                f"all {self.size} SQLite connections of the API's tables were busy for "
                f"{self.lock_timeout} s"
            )
        try:
            with self._lock:
                generation = self._generation
                conn = self._idle.pop() if self._idle else None
            if conn is None:
                conn = self._open()
            try:
                yield conn
            finally:
                with self._lock:
                    kept = generation == self._generation and not conn.in_transaction
                    if kept:
                        self._idle.append(conn)
                if not kept:
                    conn.close()
        finally:
            self._free.release()

    def read_one(self, sql: str, params: Sequence[Any] = ()) -> Any:
        """The first row of one statement, without BEGIN and COMMIT around it."""
        with self.connection() as conn:
            try:
                return conn.execute(sql, params).fetchone()
            except sqlite3.Error as exc:
                raise SQLITE.store(exc, self.not_ready) from None

    def close(self) -> None:
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            conn.close()

    def _open(self) -> sqlite3.Connection:
        create_private(self.path)
        try:
            conn = sqlite3.connect(
                self.path, timeout=self.lock_timeout, isolation_level=None,
                check_same_thread=False,  # lent to one thread at a time, not always the same
            )  # fmt: skip
        except sqlite3.Error as exc:
            raise StoreNotReady(f"cannot open {self.path}: {exc}") from None
        try:
            for pragma in self.pragmas:
                conn.execute(pragma)
        except BaseException:
            conn.close()
            raise
        return conn

    @contextmanager
    def transaction(self, *, writes: bool = False, serial: bool = False) -> Iterator[Any]:
        # BEGIN IMMEDIATE holds the write lock from the start: one writer at a time, and
        # racing writers queue instead of failing on an upgrade.
        if serial:  # a migration or a first key: the file's folder may not exist yet
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        with self.connection() as conn:
            try:
                cur = conn.cursor()
                if writes or serial:  # (inside `without_waiting`: TurnNotFree, not a wait)
                    begin_immediate(cur, self.lock_timeout)
                else:
                    cur.execute("BEGIN")
                yield cur
                conn.commit()
            except sqlite3.Error as exc:
                conn.rollback()
                raise SQLITE.store(exc, self.not_ready) from None
            except BaseException:
                conn.rollback()
                raise

    def execute(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> None:
        cursor.execute(sql, params)


class PostgresTableConnections(TableConnections):
    """A small PostgreSQL pool of the tables' own; a call waits `wait` seconds for a
    connection, then StoreUnavailable (an outage fails fast instead of piling up
    requests). `serial` transactions take the advisory lock `lock_id` (CREATE ... IF NOT
    EXISTS can still collide in the catalog when two processes run it at once; the lock
    queues them instead). `autocommit`: a `statement` is its own transaction, one round
    trip with no BEGIN and COMMIT around it."""

    def __init__(
        self, database_url: str, not_ready: str, *, size: int, wait: float, lock_id: int,
        autocommit: bool = False,
    ) -> None:  # fmt: skip
        self.not_ready = not_ready
        self.lock_id = lock_id
        self.pool: ConnectionPool[Any] = ConnectionPool(
            database_url, min_size=1, max_size=size, timeout=wait, open=True,
            kwargs={"autocommit": autocommit},
        )  # fmt: skip

    @contextmanager
    def cursor(self, *, transaction: bool = True) -> Iterator[Any]:
        """A pooled cursor; `transaction`: inside one (on an autocommit pool, without it
        one statement is its own transaction)."""
        try:
            with (
                self.pool.connection() as conn,
                conn.transaction() if transaction else contextlib.nullcontext(),
                conn.cursor() as cur,
            ):
                yield cur
        except psycopg.Error as exc:
            mapped = POSTGRES.store(exc, self.not_ready)
            if mapped is exc:
                raise
            raise mapped from None

    @contextmanager
    def transaction(self, *, writes: bool = False, serial: bool = False) -> Iterator[Any]:
        with self.cursor() as cur:
            if serial:
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (self.lock_id,))
            yield cur

    def statement(self) -> contextlib.AbstractContextManager[Any]:
        """A cursor for one statement, its own transaction on an autocommit pool."""
        return self.cursor(transaction=False)

    def execute(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> None:
        # No parameters: None, so that psycopg reads no placeholder in a function's body.
        cursor.execute(to_psycopg(sql), params or None)

    def close(self) -> None:
        self.pool.close()


class Notices:
    """How often a table changed, as this process knows it: a counter moved by every
    NOTIFY on `channel` (and by every reconnection, which may have missed some). None
    while not listening: then nothing read before is to be trusted."""

    def __init__(self, database_url: str, channel: str) -> None:
        self.database_url = database_url
        self.channel = channel
        self._version: int | None = None
        self._moves = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="table-notices", daemon=True)

    @property
    def version(self) -> int | None:
        return self._version

    def start(self) -> None:
        """Start listening (until the first LISTEN, the version is None)."""
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _moved(self, listening: bool) -> None:
        self._moves += 1
        self._version = self._moves if listening else None

    def _listen(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.database_url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {self.channel}")
                    self._moved(listening=True)
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                            self._moved(listening=True)
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("%s notices: %s; read from the store until back", self.channel, exc)
            finally:
                self._moved(listening=False)
            self._stop.wait(RECONNECT_SECONDS)
