"""Writers of one SQLite file take turns on a lock file beside it (write_turns.py): one
holder at a time across processes and threads, a waiter that gets in once the holder lets
go, a clear error when no turn comes within the timeout, and a turn let go when its
block raises."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from eventsourcing.persistence import IntegrityError, OperationalError
from eventsourcing.sqlite import SQLiteConnectionPool

from session_ledger.projections.write_turns import WriteTransaction, WriteTurns, lock_file_of
from tests.conftest import turn_held


def test_a_turn_another_process_holds_times_out_then_comes_once_let_go(tmp_path: Path) -> None:
    turns = WriteTurns(lock_file_of(str(tmp_path / "ledger.db")), timeout=0.2)
    entered = threading.Event()

    def write() -> None:
        with turns.held():
            entered.set()

    with turn_held(tmp_path / "ledger.db") as let_go:
        locked = r"database is locked: no turn .* 0\.2 s"
        with pytest.raises(OperationalError, match=locked), turns.held():
            pytest.fail("two holders at once")
        turns.timeout = 30
        writer = threading.Thread(target=write)
        writer.start()
        assert not entered.wait(0.1)  # still the other process's turn
        let_go.set()
        writer.join(10)
    assert entered.is_set()
    turns.close()


def test_threads_of_one_process_write_one_at_a_time(tmp_path: Path) -> None:
    # (one lock file descriptor is shared by a process's threads: the thread lock orders them)
    turns = WriteTurns(lock_file_of(str(tmp_path / "ledger.db")), timeout=30)
    inside, most = 0, 0
    guard = threading.Lock()

    def write() -> None:
        nonlocal inside, most
        for _ in range(50):
            with turns.held():
                with guard:
                    inside += 1
                    most = max(most, inside)
                time.sleep(0.0002)  # others try meanwhile
                with guard:
                    inside -= 1

    threads = [threading.Thread(target=write) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert most == 1
    turns.close()


def test_a_block_that_raises_lets_its_turn_go(tmp_path: Path) -> None:
    path = lock_file_of(str(tmp_path / "ledger.db"))
    first, second = WriteTurns(path, timeout=30), WriteTurns(path, timeout=0.05)
    with pytest.raises(KeyError), first.held():
        raise KeyError("the write failed")
    with second.held():  # the file's lock is free: had at once, within 50 ms
        pass
    with first.held():  # and the thread lock too
        pass
    first.close()
    second.close()


def test_an_in_memory_database_takes_turns_without_a_file(tmp_path: Path) -> None:
    turns = WriteTurns(None, timeout=1)
    with turns.held():
        pass
    turns.close()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("db_name", "lock_file"),
    [
        ("/var/lib/ledger.db", "/var/lib/ledger.db-writers"),
        ("var/ledger.db", "var/ledger.db-writers"),
        ("file:/srv/my%20ledger.db?vfs=unix-dotfile", "/srv/my ledger.db-writers"),
        ("file:///srv/ledger.db?mode=rwc", "/srv/ledger.db-writers"),
    ],
)
def test_the_lock_file_sits_beside_the_database(db_name: str, lock_file: str) -> None:
    assert lock_file_of(db_name) == lock_file


def test_a_write_transaction_that_fails_stores_nothing_and_lets_everything_go(
    tmp_path: Path,
) -> None:
    """One object for the turn, the pool's writer connection, the transaction and its
    cursor: a block that raises sqlite3's error raises the library's, rolls back, and
    gives back the connection (and the pool's writer lock) and the turn."""
    db_name = str(tmp_path / "ledger.db")
    pool = SQLiteConnectionPool(db_name=db_name, pool_size=1, max_overflow=0, pool_timeout=0.1)
    turns = WriteTurns(lock_file_of(db_name), timeout=0.1)
    with WriteTransaction(pool, turns) as cursor:
        cursor.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
        cursor.execute("INSERT INTO t VALUES (1)")
    with pytest.raises(IntegrityError), WriteTransaction(pool, turns) as cursor:
        cursor.execute("INSERT INTO t VALUES (2)")
        cursor.execute("INSERT INTO t VALUES (1)")
    with WriteTransaction(pool, turns) as cursor:  # at once: nothing is still held
        cursor.execute("SELECT x FROM t")
        assert [tuple(row) for row in cursor.fetchall()] == [(1,)]
    with pytest.raises(KeyError), WriteTransaction(pool, turns) as cursor:
        cursor.execute("INSERT INTO t VALUES (3)")
        raise KeyError("the write failed")
    with WriteTransaction(pool, turns) as cursor:
        cursor.execute("SELECT count(*) FROM t")
        assert cursor.fetchone()[0] == 1
    pool.close()
    turns.close()


def test_a_write_transaction_holds_the_write_lock_from_its_start(tmp_path: Path) -> None:
    """Writers that take no turn (the key and rate-limit tables' own transactions, a tool)
    wait for a write transaction from its BEGIN: one that read first and then wrote, after
    such a writer committed, failed at once ('database is locked': SQLite's stale snapshot,
    which no busy handler waits out), and an access-log entry with it (a 503)."""
    db_name = str(tmp_path / "ledger.db")
    pool = SQLiteConnectionPool(
        db_name=db_name, lock_timeout=1, pool_size=1, max_overflow=0, pool_timeout=0.1
    )
    turns = WriteTurns(lock_file_of(db_name), timeout=0.1)
    with WriteTransaction(pool, turns) as cursor:
        cursor.execute("CREATE TABLE t (x INTEGER PRIMARY KEY)")
    other = sqlite3.connect(db_name, timeout=0, isolation_level=None)
    try:
        with WriteTransaction(pool, turns) as cursor:
            cursor.execute("SELECT count(*) FROM t")
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("INSERT INTO t VALUES (2)")
            cursor.execute("INSERT INTO t VALUES (1)")
        other.execute("BEGIN IMMEDIATE")  # the other writer waits its turn, then goes
        with pytest.raises(OperationalError, match="locked"), WriteTransaction(pool, turns):
            pytest.fail("begun while another connection held the write lock")
        other.execute("INSERT INTO t VALUES (2)")
        other.execute("COMMIT")
        assert [row[0] for row in other.execute("SELECT x FROM t ORDER BY x")] == [1, 2]
    finally:
        other.close()
