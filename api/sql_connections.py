"""Connections of the API's own tables (API keys, rate limits) beside the ledger's, and
what their failures mean: a table not made yet is `StoreNotReady` (run `migrate`), a
store that cannot answer now is `StoreUnavailable` (503 with Retry-After)."""

from __future__ import annotations

import contextlib
import sqlite3
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from session_ledger.domain.errors import StoreNotReady, StoreUnavailable
from session_ledger.projections.sqlite_files import create_private


class SQLiteConnections:
    """At most `size` connections to one SQLite file, each set up by `pragmas`, lent to
    one caller at a time and kept open for the next (opening one costs 0.4 ms, which
    every request would pay); a caller finding all lent waits for one, at most
    `lock_timeout` seconds (then StoreUnavailable). Calls are short (a read of one row,
    a bucket's update), so the wait is too.

    None is tied to a thread: worker threads come and go (AnyIO retires idle ones), and a
    connection kept per thread stayed open after its thread was gone. None is closed
    while the store is in use either: SQLite defers closing a file descriptor while
    another connection of the process holds a lock on the file (a POSIX close would drop
    that lock), and on a busy server one always does, so each connection closed then
    stayed open."""

    def __init__(
        self, path: str, lock_timeout: float, pragmas: Sequence[str] = (), *, size: int = 8
    ) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
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

    def close(self) -> None:
        """Close the idle connections; those lent now close when given back."""
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
    def transaction(self, not_migrated: str, *, lock: bool = False) -> Iterator[sqlite3.Cursor]:
        """A cursor in one transaction; `lock`: BEGIN IMMEDIATE, holding the write lock
        from the start (racing writers queue instead of failing on an upgrade)."""
        with self.connection() as conn:
            try:
                cur = conn.cursor()
                cur.execute("BEGIN IMMEDIATE" if lock else "BEGIN")
                yield cur
                conn.commit()
            except sqlite3.OperationalError as exc:
                conn.rollback()
                raise sqlite_failure(exc, not_migrated) from None
            except BaseException:
                conn.rollback()
                raise


def sqlite_failure(exc: sqlite3.OperationalError, not_migrated: str) -> StoreNotReady:
    """What an SQLite error of one of these tables means to a request."""
    if "no such table" in str(exc):
        return StoreNotReady(not_migrated)
    return StoreUnavailable(f"SQLite: {exc}")


def open_pool(database_url: str, *, size: int, wait: float, autocommit: bool = False) -> Any:
    """A small PostgreSQL pool; a request waits `wait` seconds for a connection, then
    answers 503 (an outage fails fast instead of piling up requests)."""
    from psycopg_pool import ConnectionPool

    return ConnectionPool(
        database_url, min_size=1, max_size=size, timeout=wait, open=True,
        kwargs={"autocommit": autocommit},
    )  # fmt: skip


@contextmanager
def postgres_cursor(pool: Any, not_migrated: str, *, transaction: bool = True) -> Iterator[Any]:
    """A cursor from `pool`; `transaction`: inside one (on an autocommit pool, without it
    one statement is its own transaction, one round trip)."""
    import psycopg
    from psycopg_pool import PoolTimeout

    try:
        with (
            pool.connection() as conn,
            conn.transaction() if transaction else contextlib.nullcontext(),
            conn.cursor() as cur,
        ):
            yield cur
    except (psycopg.errors.UndefinedTable, psycopg.errors.UndefinedFunction):
        raise StoreNotReady(not_migrated) from None
    except (psycopg.OperationalError, PoolTimeout) as exc:
        raise StoreUnavailable(f"PostgreSQL unreachable: {exc}") from None
