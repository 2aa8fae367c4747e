"""The SQLite store's writers: one connection they share, and checkpoints of the WAL run
by a thread of the pool rather than inside a writer's COMMIT."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections import sqlite as store


def open_sqlite(tmp_path: Path) -> Ledger:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(settings)
    return open_ledger(settings)


def wait_for(condition: object, seconds: float = 30.0) -> bool:
    """Poll `condition()` (a thread's progress, not a measured time) until it holds."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.01)
    return False


def test_writes_share_one_connection_that_leaves_checkpoints_to_the_pool(
    tmp_path: Path,
) -> None:
    ledger = open_sqlite(tmp_path)
    pool = ledger.recorder.datastore.pool
    assert isinstance(pool, store._DurablePool)
    ledger.put("k", {"role": "user", "content": "first"})
    writer = pool.get_connection(is_writer=True)
    pool.put_connection(writer)
    ledger.put("k", {"role": "user", "content": "second"})
    again = pool.get_connection(is_writer=True)
    pool.put_connection(again)
    assert again is writer  # not checked out of the pool anew for every write
    assert isinstance(writer, store._LedgerConnection)
    settings = {
        name: writer.sqlite.execute(f"PRAGMA {name}").fetchone()[0]
        for name in ("wal_autocheckpoint", "journal_size_limit", "synchronous", "journal_mode")
    }
    assert settings == {
        "wal_autocheckpoint": store.WRITER_AUTOCHECKPOINT,
        "journal_size_limit": store.WAL_SIZE_LIMIT,
        "synchronous": 2,  # FULL: every commit is on disk when the write returns
        "journal_mode": "wal",
    }
    # Readers keep pooled connections of their own.
    reader = pool.get_connection(is_writer=False)
    pool.put_connection(reader)
    assert reader is not writer
    ledger.close()


def test_the_checkpointer_runs_every_so_many_writes(tmp_path: Path) -> None:
    ledger = open_sqlite(tmp_path)
    pool = ledger.recorder.datastore.pool
    ledger.put("k", {"role": "user", "content": "opens the writer"})
    checkpointer = pool.checkpointer
    assert checkpointer is not None and checkpointer.running
    assert checkpointer.checkpoints == 0
    for i in range(store.CHECKPOINT_EVERY):
        ledger.put(f"k{i % 7}", {"role": "user", "content": f"message {i}"})
    assert wait_for(lambda: checkpointer.checkpoints >= 1)
    # Every page the writes changed is now in the database file: a checkpoint from a
    # new connection has nothing left to copy, bar the frames of later writes (none).
    with sqlite3.connect(tmp_path / "ledger.db") as conn:
        busy, wal_frames, copied = conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchone()
    assert busy == 0 and copied == wal_frames
    assert len(ledger.get_all("k3")) == len(range(3, store.CHECKPOINT_EVERY, 7))
    ledger.close()
    assert not checkpointer.running


def test_threads_writing_at_once_all_land_through_the_shared_connection(
    tmp_path: Path,
) -> None:
    ledger = open_sqlite(tmp_path)
    errors: list[BaseException] = []

    def write(name: str) -> None:
        try:
            for i in range(60):
                ledger.put(name, {"role": "user", "content": f"{name} {i}"})
                ledger.put("shared", {"role": "user", "content": f"{name} {i}"})
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=write, args=(f"t{n}",)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert [len(ledger.get_all(f"t{n}")) for n in range(4)] == [60] * 4
    shared = [m.content for m in ledger.get_all("shared")]
    assert sorted(shared) == sorted(f"t{n} {i}" for n in range(4) for i in range(60))
    assert ledger.verify("shared").intact
    ledger.close()


def test_close_stops_the_checkpointer_and_later_writes_fail_cleanly(tmp_path: Path) -> None:
    ledger = open_sqlite(tmp_path)
    ledger.put("k", {"role": "user", "content": "hello"})
    pool = ledger.recorder.datastore.pool
    checkpointer = pool.checkpointer
    assert checkpointer is not None
    ledger.close()
    assert not checkpointer.running
    with pytest.raises(ConnectionPoolClosedError):  # as the library's pool raises
        ledger.put("k", {"role": "user", "content": "after close"})
    reopened = open_sqlite(tmp_path)
    assert [m.content for m in reopened.get_all("k")] == ["hello"]
    reopened.close()


def test_an_in_memory_store_keeps_the_library_pool() -> None:
    ledger = open_ledger(Settings(database_url="memory://"))
    ledger.put("k", {"role": "user", "content": "hello"})
    pool = ledger.recorder.datastore.pool
    assert pool.checkpointer is None
    first = pool.get_connection(is_writer=True)
    pool.put_connection(first)
    assert ledger.get_all("k")[0].content == "hello"
    ledger.close()
