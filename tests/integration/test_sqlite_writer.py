"""The SQLite store's connections: durable (WAL, synchronous=FULL), shared by threads."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import ConnectionPoolClosedError

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections import key_rows, view_writes
from session_ledger.projections.eventsourcing_compat import DurableSQLitePool


def open_sqlite(tmp_path: Path) -> Ledger:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(settings)
    return open_ledger(settings)


def test_connections_are_durable(tmp_path: Path) -> None:
    ledger = open_sqlite(tmp_path)
    ledger.put("k", {"role": "user", "content": "first"})
    pool = ledger.recorder.datastore.pool
    assert isinstance(pool, DurableSQLitePool)
    for is_writer in (True, False):
        conn = pool.get_connection(is_writer=is_writer)
        try:
            with conn.cursor() as c:
                settings = {}
                for name in ("synchronous", "journal_mode"):
                    c.execute(f"PRAGMA {name}")
                    settings[name] = c.fetchone()[0]
        finally:
            pool.put_connection(conn)
        assert settings == {
            "synchronous": 2,  # FULL: every commit is on disk when the write returns
            "journal_mode": "wal",
        }
    ledger.close()


def test_threads_writing_at_once_all_land(
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


def test_later_writes_fail_cleanly_after_close(tmp_path: Path) -> None:
    ledger = open_sqlite(tmp_path)
    ledger.put("k", {"role": "user", "content": "hello"})
    ledger.close()
    with pytest.raises(ConnectionPoolClosedError):  # as the library's pool raises
        ledger.put("k", {"role": "user", "content": "after close"})
    reopened = open_sqlite(tmp_path)
    assert [m.content for m in reopened.get_all("k")] == ["hello"]
    reopened.close()


def test_the_wal_is_checkpointed_after_the_write_turn(tmp_path: Path) -> None:
    """A commit does not copy the WAL into the database file while its writer holds the
    turn every other writer waits for (SQLite's autocheckpoint did, in the COMMIT that
    took the WAL past 1,000 pages: 300-700 ms after a 28 MiB write): the connections do
    not checkpoint on commit, and the write checkpoints once it has given the turn back."""
    ledger = open_sqlite(tmp_path)
    dialect = ledger.recorder.dialect
    checkpoints, turns = dialect.checkpoints, dialect.turns
    held_at_checkpoint: list[bool] = []
    reading = checkpoints._reading

    def checkpointing() -> Any:
        held_at_checkpoint.append(turns._thread_turn.locked())
        return reading()

    checkpoints._reading = checkpointing
    pool = ledger.recorder.datastore.pool
    conn = pool.get_connection(is_writer=True)
    try:
        with conn.cursor() as c:
            c.execute("PRAGMA wal_autocheckpoint")
            assert c.fetchone()[0] == 0
    finally:
        pool.put_connection(conn)
    ledger.put("small", {"role": "user", "content": "hello"})
    assert held_at_checkpoint == []  # a few pages: none due
    text = "x" * (3 * 1024 * 1024)  # 6 MiB of pages: events and rows
    ledger.put_messages("large", [{"role": "user", "content": text}])
    assert held_at_checkpoint == [False]
    assert (tmp_path / "ledger.db").stat().st_size > 2 * len(text)  # copied from the WAL
    assert ledger.get_all("large")[0].content == text
    ledger.close()


def test_rows_and_chain_hashes_are_made_before_the_write_turn(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write's view rows and chain hashes need nothing the store holds (h_{v-1} is the
    genesis, or this process's note of the row before, checked in the transaction), so
    they are made before the turn that every other writer of the file waits for: 20-90 ms
    of SHA-256 and copies for a 28 MiB write. A note that no longer holds is not used."""
    ledger = open_sqlite(tmp_path)
    turns = ledger.recorder.dialect.turns
    held: dict[str, list[bool]] = {"hashed": [], "rows made": []}
    hashes, changes = view_writes.chain_hashes, key_rows.view_changes

    def hashing(*args: Any) -> Any:
        held["hashed"].append(turns._thread_turn.locked())
        return hashes(*args)

    def making_rows(*args: Any) -> Any:
        held["rows made"].append(turns._thread_turn.locked())
        return changes(*args)

    monkeypatch.setattr(view_writes, "chain_hashes", hashing)
    monkeypatch.setattr(key_rows, "view_changes", making_rows)
    for text in ("first", "second", "third"):  # the session's start, then the note's
        ledger.put("k", {"role": "user", "content": text})
    assert held == {"hashed": [False] * 3, "rows made": [False] * 3}

    stale = [bytes(32), bytes(32)]  # made from a note that no longer holds
    monkeypatch.setattr(ledger.recorder, "_chains_ahead", lambda *a: stale)
    ledger.put("k", {"role": "user", "content": "fourth"})
    assert held["hashed"][3:] == [True]  # hashed again, in the transaction
    assert ledger.verify("k").intact
    assert [m.content for m in ledger.get_all("k")] == ["first", "second", "third", "fourth"]
    ledger.close()


def test_a_puts_view_rows_bind_no_bytes_nor_none(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """sqlite3 binds an int, float, str or bytearray as it is, and looks the adapter of a
    bytes value or None up first (two attribute look-ups that fail): the timeline's chain
    hash goes as a bytearray, and is stored as the same bytes; an audit value that is None
    is NULL in the statement, and is stored as NULL."""
    from session_ledger.projections.sqlite import SQLiteDialect

    bound: list[type] = []
    execute = SQLiteDialect.execute

    def recorded(self: Any, cursor: Any, sql: str, params: Any) -> None:
        bound.extend(type(p) for p in params)
        execute(self, cursor, sql, params)

    monkeypatch.setattr(SQLiteDialect, "execute", recorded)
    ledger = open_sqlite(tmp_path)
    try:
        ledger.put("k", {"role": "user", "content": "first"})
        ledger.put("k", {"role": "user", "content": "second"})
        ledger.put("k", {"role": "user", "content": "third"}, reason="why", idempotency_key="i")
        assert bytearray in bound
        assert bytes not in bound
        assert type(None) not in bound
        assert ledger.verify("k").first_bad_version is None
        with closing(sqlite3.connect(tmp_path / "ledger.db")) as db:
            audit = db.execute(
                "SELECT reason, idempotency_key, request_digest IS NULL FROM ledger_timeline"
                " ORDER BY version"
            ).fetchall()
        assert [a[0] for a in audit] == [None, None, None, "why"]
        assert audit[-1][1:] == ("i", 0)
        assert all(a[2] for a in audit[:-1])
    finally:
        ledger.close()
