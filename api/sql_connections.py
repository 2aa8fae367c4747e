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
    """A connection per thread to one SQLite file (opening one per request cost 0.4 ms of
    every request), each set up by `pragmas`; `close()` closes them all."""

    def __init__(self, path: str, lock_timeout: float, pragmas: Sequence[str] = ()) -> None:
        self.path = path
        self.lock_timeout = lock_timeout
        self.pragmas = tuple(pragmas)
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def connection(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = sqlite3.connect(
                self.path, timeout=self.lock_timeout, isolation_level=None,
                check_same_thread=False,  # closed from another thread by close()
            )  # fmt: skip
            for pragma in self.pragmas:
                conn.execute(pragma)
            self._local.conn = conn
            with self._lock:
                self._opened.append(conn)
        return conn

    def close(self) -> None:
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
        self._local = threading.local()

    @contextmanager
    def transaction(self, not_migrated: str, *, lock: bool = False) -> Iterator[sqlite3.Cursor]:
        """A cursor in one transaction; `lock`: BEGIN IMMEDIATE, holding the write lock
        from the start (racing writers queue instead of failing on an upgrade)."""
        try:
            conn = self.connection()
        except sqlite3.Error as exc:
            raise StoreNotReady(f"cannot open {self.path}: {exc}") from None
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
