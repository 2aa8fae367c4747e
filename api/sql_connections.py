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


class SQLiteConnections:
    """Connections to one SQLite file, each set up by `pragmas`, lent to one caller at a
    time and given back: at most `keep` stay open between calls (opening one costs 0.4 ms,
    which every request would pay). When all are lent one more is opened, and closed when
    given back to a full pool: a caller never waits here (the event loop reads the key
    table's version through one), and the connections open come back to `keep` once a
    burst is answered. None is tied to a thread: worker threads come and go (AnyIO retires
    idle ones), and a connection kept per thread stayed open after its thread was gone."""

    def __init__(
        self, path: str, lock_timeout: float, pragmas: Sequence[str] = (), *, keep: int = 8
    ) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self.pragmas = tuple(pragmas)
        self.keep = keep
        self._idle: list[sqlite3.Connection] = []
        self._lock = threading.Lock()
        # close() moves it: a connection lent before is closed when given back.
        self._generation = 0

    @contextmanager
    def connection(self) -> Iterator[sqlite3.Connection]:
        """A connection of this caller's alone until the block ends."""
        with self._lock:
            generation = self._generation
            conn = self._idle.pop() if self._idle else None
        if conn is None:
            conn = self._open()
        try:
            yield conn
        finally:
            with self._lock:
                kept = (generation == self._generation and len(self._idle) < self.keep
                        and not conn.in_transaction)  # fmt: skip
                if kept:
                    self._idle.append(conn)
            if not kept:
                conn.close()

    def close(self) -> None:
        """Close the idle connections; those lent now close when given back."""
        with self._lock:
            idle, self._idle = self._idle, []
            self._generation += 1
        for conn in idle:
            conn.close()

    def _open(self) -> sqlite3.Connection:
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
