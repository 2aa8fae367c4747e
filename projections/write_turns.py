"""The writers of one SQLite file take turns on a lock file beside it.

SQLite lets one writer in at a time. A writer that finds the file locked waits in
SQLite's busy handler, which sleeps 1, 2, 5, 10, 15, 20, 25 ... 100 ms between tries.
Where several processes write one file (two server workers, or a command run beside the
server), a process whose group commits follow one another closely leaves the lock free
only for microseconds between them, so the other process's writers sleep on, tens of
milliseconds each (with two workers at concurrency 16, p99 rose threefold or more
and throughput fell below that of concurrency 1).

Here each write transaction first takes its process's turn (a thread lock: a lock file's
`flock` is shared by the threads of a process), then the file's: an exclusive `flock` on
`<database>-writers`, tried again every 0.1 ms, the pause doubling up to 1 ms. A waiter
thus begins within a millisecond of the lock coming free. A turn not had within the lock
timeout raises the library's OperationalError, as SQLite's own wait does; SQLite still
guards the data itself (a writer that takes no turn, such as the sqlite3 shell, is kept
out by SQLite's lock as before). An in-memory database has one process: the thread lock
alone.
"""

from __future__ import annotations

import contextvars
import fcntl
import os
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import unquote, urlsplit

from eventsourcing.persistence import OperationalError
from eventsourcing.sqlite import SQLiteConnectionPool, SQLiteCursor, SQLiteTransaction

from .driver_errors import SQLITE
from .eventsourcing_compat import SQLITE_LOCK_WAIT_SECONDS

FIRST_PAUSE = 0.0001  # seconds between tries of the file's lock, doubling...
LONGEST_PAUSE = 0.001  # ...up to this

# False in a `without_waiting` block: its writes never wait for another writer.
_WAITS: contextvars.ContextVar[bool] = contextvars.ContextVar("ledger_write_waits", default=True)


class TurnNotFree(Exception):
    """A write that may not wait (`without_waiting`) found another writer of the database
    at work: nothing of it is stored, and it may run again where it may wait."""


@contextmanager
def without_waiting() -> Iterator[None]:
    """The writes of this block (in this thread or task) raise TurnNotFree where they
    would wait for another writer: for this process's turn or the file's, for another
    write of this process committing, or for SQLite's lock. For a write on the event
    loop, where a wait of seconds (another process's long transaction) held every
    request."""
    token = _WAITS.set(False)
    try:
        yield
    finally:
        _WAITS.reset(token)


def check_may_wait() -> None:
    """Raise TurnNotFree inside `without_waiting`."""
    if not _WAITS.get():
        raise TurnNotFree("another writer is at work")


def begin_immediate(cursor: sqlite3.Cursor, lock_timeout: float) -> None:
    """BEGIN IMMEDIATE: SQLite's write lock, waited for up to `lock_timeout` seconds (the
    connection's busy timeout); inside `without_waiting`, tried once (TurnNotFree when
    another connection holds it; its busy handler would wait)."""
    if _WAITS.get():
        cursor.execute("BEGIN IMMEDIATE")
        return
    cursor.execute("PRAGMA busy_timeout = 0")
    try:
        cursor.execute("BEGIN IMMEDIATE")
    except sqlite3.OperationalError as e:
        if e.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY:
            raise TurnNotFree("another connection holds the database's lock") from None
        raise
    finally:
        cursor.execute(f"PRAGMA busy_timeout = {round(lock_timeout * 1000):d}")


def lock_file_of(db_name: str) -> str:
    """The lock file beside a database named as sqlite3 opens it: a path, or a `file:` URI
    (whose path it takes, without the query)."""
    path = unquote(urlsplit(db_name).path) if db_name.startswith("file:") else db_name
    return f"{path}-writers"


class WriteTurns:
    """Turns to write one SQLite database: `with turns.held(): <a write transaction>`."""

    def __init__(self, lock_path: str | None, timeout: float) -> None:
        """`lock_path`: the lock file (made at the first turn), None for an in-memory
        database; `timeout`: seconds a writer waits for its turn."""
        self.lock_path = lock_path
        self.timeout = timeout
        self._thread_turn = threading.Lock()
        self._fd: int | None = None

    @contextmanager
    def held(self) -> Iterator[None]:
        """This process's turn, then the file's; both let go when the block ends."""
        self.take()
        try:
            yield
        finally:
            self.give_back()

    def take(self) -> None:
        """This process's turn, then the file's (`give_back` lets both go)."""
        deadline = time.monotonic() + self.timeout
        waits = _WAITS.get()
        if not self._thread_turn.acquire(timeout=self.timeout if waits else 0):
            raise self._timed_out() if waits else TurnNotFree("this process's turn is taken")
        try:
            fd = self._lock_file()
            if fd is not None:
                self._take(fd, deadline if waits else None)
        except BaseException:
            self._thread_turn.release()
            raise

    def give_back(self) -> None:
        """Let go of the turn `take` had."""
        try:
            if self._fd is not None:
                fcntl.flock(self._fd, fcntl.LOCK_UN)
        finally:
            self._thread_turn.release()

    def close(self) -> None:
        with self._thread_turn:
            if self._fd is not None:
                os.close(self._fd)
                self._fd = None

    def _lock_file(self) -> int | None:
        if self.lock_path is not None and self._fd is None:
            self._fd = os.open(self.lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        return self._fd

    def _take(self, fd: int, deadline: float | None) -> None:
        """The file's lock, tried until `deadline` (None: once, else TurnNotFree)."""
        pause = FIRST_PAUSE
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return
            except BlockingIOError:
                if deadline is None:
                    raise TurnNotFree(f"another process holds {self.lock_path}") from None
                if time.monotonic() >= deadline:
                    raise self._timed_out() from None
                time.sleep(pause)
                pause = min(pause * 2, LONGEST_PAUSE)

    def _timed_out(self) -> OperationalError:
        return OperationalError(
            f"database is locked: no turn to write in {self.timeout:g} s "
            f"(another writer holds {self.lock_path or 'the database'})"
        )


class WriteTransaction:
    """One write transaction as one object: this writer's turn (`WriteTurns`), a writer
    connection from the library's pool, its cursor, begun IMMEDIATE (`begin_immediate`),
    and the library's `SQLiteTransaction` to end it (COMMIT on a clean exit, else
    ROLLBACK; sqlite3's errors raised as the library's), let go in reverse order at the
    end. What `with turns.held(), datastore.transaction(commit=True) as c` does through
    six nested context managers, four of them generators, with the library's public pool,
    connection, transaction and cursor classes.

    IMMEDIATE: the transaction holds SQLite's write lock from its start, so writers that
    take no turn (the API tables' transactions, a tool) wait for it in SQLite's busy
    handler. Begun plainly, a transaction that read and then wrote after such a writer
    had committed failed at once ('database is locked': its snapshot was stale, which no
    busy handler waits out)."""

    __slots__ = ("_conn", "_cursor", "_pool", "_transaction", "_turns")

    def __init__(self, pool: SQLiteConnectionPool, turns: WriteTurns) -> None:
        self._pool, self._turns = pool, turns

    def __enter__(self) -> SQLiteCursor:
        self._turns.take()
        try:
            conn = self._conn = self._pool.get_connection(is_writer=True)
            try:
                cursor = self._cursor = conn.cursor()
                try:
                    begin_immediate(
                        cursor.sqlite_cursor, self._pool.lock_timeout or SQLITE_LOCK_WAIT_SECONDS
                    )
                except BaseException as e:
                    cursor.sqlite_cursor.close()
                    if isinstance(e, sqlite3.Error):  # (locked past the timeout)
                        raise SQLITE.library(e) from e
                    raise
                self._transaction = SQLiteTransaction(conn, commit=True)
                return cursor
            except BaseException:
                self._pool.put_connection(conn)
                raise
        except BaseException:
            self._turns.give_back()
            raise

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any
    ) -> None:
        try:
            self._cursor.sqlite_cursor.close()
            # COMMIT, or ROLLBACK and the block's error raised again (as the library's).
            self._transaction.__exit__(exc_type, exc, tb)
        finally:
            try:
                self._pool.put_connection(self._conn)
            finally:
                self._turns.give_back()
