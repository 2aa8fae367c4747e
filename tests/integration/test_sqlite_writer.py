"""The SQLite store's writers: one connection they share, held one writer at a time."""

from __future__ import annotations

import threading
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


def test_writes_share_one_connection(tmp_path: Path) -> None:
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
        for name in ("synchronous", "journal_mode", "wal_autocheckpoint")
    }
    assert settings == {
        "synchronous": 2,  # FULL: every commit is on disk when the write returns
        "journal_mode": "wal",
        "wal_autocheckpoint": 1000,  # SQLite's: a short WAL keeps every lookup in it short
    }
    # Readers keep pooled connections of their own.
    reader = pool.get_connection(is_writer=False)
    pool.put_connection(reader)
    assert reader is not writer
    ledger.close()


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


def test_close_closes_the_writer_and_later_writes_fail_cleanly(tmp_path: Path) -> None:
    ledger = open_sqlite(tmp_path)
    ledger.put("k", {"role": "user", "content": "hello"})
    pool = ledger.recorder.datastore.pool
    writer = pool.get_connection(is_writer=True)
    pool.put_connection(writer)
    ledger.close()
    assert writer.closed
    with pytest.raises(ConnectionPoolClosedError):  # as the library's pool raises
        ledger.put("k", {"role": "user", "content": "after close"})
    reopened = open_sqlite(tmp_path)
    assert [m.content for m in reopened.get_all("k")] == ["hello"]
    reopened.close()


def test_an_in_memory_store_keeps_the_library_pool() -> None:
    # Its shared-cache connections need the library's exclusion of readers by writers.
    ledger = open_ledger(Settings(database_url="memory://"))
    ledger.put("k", {"role": "user", "content": "hello"})
    pool = ledger.recorder.datastore.pool
    writer = pool.get_connection(is_writer=True)
    pool.put_connection(writer)
    assert pool._writer is None
    assert ledger.get_all("k")[0].content == "hello"
    ledger.close()
