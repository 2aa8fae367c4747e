"""What the ledger relies on in the eventsourcing library: fails loudly when a release
changes it (see projections/eventsourcing_compat.py and the pin in pyproject.toml)."""

from __future__ import annotations

import contextlib
import sqlite3
import uuid
from collections.abc import Iterator
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.application import Application
from eventsourcing.domain import Aggregate, event
from eventsourcing.persistence import IntegrityError
from eventsourcing.sqlite import SQLiteApplicationRecorder, SQLiteConnectionPool

from session_ledger.projections.eventsourcing_compat import DurableSQLitePool


def test_the_pool_makes_its_connections_with_the_overridden_method(tmp_path: Path) -> None:
    # The one override of a private method: the library's pool must still create every
    # connection through `_create_connection`, for both readers and the writer.
    assert "_create_connection" in vars(SQLiteConnectionPool), version("eventsourcing")
    pool = DurableSQLitePool(db_name=str(tmp_path / "x.db"))
    try:
        for is_writer in (True, False):
            conn = pool.get_connection(is_writer=is_writer)
            try:
                with conn.cursor() as c:
                    c.execute("PRAGMA synchronous")
                    assert c.fetchone()[0] == 2  # FULL
                    c.execute("PRAGMA journal_mode")
                    assert c.fetchone()[0] == "wal"
            finally:
                pool.put_connection(conn)
    finally:
        pool.close()


class _Thing(Aggregate):
    @event("Made")
    def __init__(self, name: str) -> None:
        self.name = name


class _Seen(SQLiteApplicationRecorder):
    """The documented hook (the library's searchable-timestamps example): `_insert_events`
    runs inside the write transaction and receives the kwargs given to the event store's
    `put` (the Ledger's write calls it directly)."""

    seen: list[dict[str, Any]] = []

    def _insert_events(self, c: Any, stored_events: Any, **kwargs: Any) -> Any:
        type(self).seen.append(dict(kwargs))
        return super()._insert_events(c, stored_events, **kwargs)


@contextlib.contextmanager
def _app_recording_with(recorder: type, tmp_path: Path) -> Iterator[Application[uuid.UUID]]:
    """A library Application on SQLite in `tmp_path` whose recorder is of `recorder`."""

    class App(Application[uuid.UUID]):
        name = "compat"

    env = {
        "PERSISTENCE_MODULE": "eventsourcing.sqlite",
        "SQLITE_DBNAME": str(tmp_path / "app.db"),
        "APPLICATION_RECORDER_TOPIC": f"{__name__}:{recorder.__name__}",
    }
    app = App(env=env)
    try:
        yield app
    finally:
        app.close()


def test_the_event_store_hands_its_keyword_arguments_to_the_recorder_hook(tmp_path: Path) -> None:
    with _app_recording_with(_Seen, tmp_path) as app:
        assert isinstance(app.recorder, _Seen)
        app.events.put(_Thing("a").collect_events(), ledger_batch="batch")
        assert _Seen.seen[-1]["ledger_batch"] == "batch"


def test_the_postgres_datastore_pool_tells_how_it_connects() -> None:
    # The loop's pool (projections/postgres_async.py) connects as the library's does: it
    # reads the datastore's psycopg pool, its connection arguments and sizes (no server is
    # needed: the pool is made closed).
    from eventsourcing.postgres import PostgresDatastore
    from psycopg.rows import dict_row
    from psycopg_pool import ConnectionPool

    store = PostgresDatastore("db", "127.0.0.1", 5432, "user", "", pool_size=3, connect_timeout=7)
    pool = store.pool
    assert isinstance(pool, ConnectionPool), version("eventsourcing")
    assert isinstance(pool.kwargs, dict) and pool.kwargs["row_factory"] is dict_row
    assert (pool.kwargs["dbname"], pool.min_size, pool.timeout) == ("db", 3, 7)
    assert pool.closed


class _NoIdsRecorder(SQLiteApplicationRecorder):
    def insert_events(self, stored_events: Any, **kwargs: Any) -> None:
        super().insert_events(stored_events, **kwargs)


def test_the_event_store_builds_no_recordings_when_the_recorder_returns_no_ids(
    tmp_path: Path,
) -> None:
    # The SQLite recorder's `insert_events` returns no notification ids (nothing reads
    # them): the library's `EventStore.put` then builds no Recording objects.
    with _app_recording_with(_NoIdsRecorder, tmp_path) as app:
        thing = _Thing("a")
        assert app.events.put(thing.collect_events()) == []
        assert app.repository.get(thing.id).name == "a"


def test_the_factory_makes_the_mapper_class_it_is_given_with_the_canonical_transcoder() -> None:
    # Ledger.construct_mapper passes its mapper class to the factory (the library's
    # `mapper_class`), and EventMapper splices bytes the transcoder would have made: it
    # encodes compact and without ASCII escapes, as canonical_json does.
    from eventsourcing.persistence import InfrastructureFactory, JSONTranscoder

    from session_ledger.domain.event_mapper import EventMapper

    factory = InfrastructureFactory.construct(
        {"PERSISTENCE_MODULE": "eventsourcing.popo"}  # type: ignore[arg-type]
    )
    mapper = factory.mapper(JSONTranscoder(), EventMapper)
    assert type(mapper) is EventMapper, version("eventsourcing")
    assert mapper.transcoder.encode({"a": ["é", 1, None]}) == '{"a":["é",1,null]}'.encode()


def test_the_sqlite_transaction_hands_out_the_librarys_cursor(tmp_path: Path) -> None:
    # WriteTransaction (write_turns.py) begins the transaction itself on a cursor of the
    # connection, ends it with the library's SQLiteTransaction's exit, and closes the
    # sqlite3 cursor the SQLiteCursor holds.
    from eventsourcing.sqlite import SQLiteCursor, SQLiteTransaction

    pool = SQLiteConnectionPool(db_name=str(tmp_path / "x.db"))
    conn = pool.get_connection(is_writer=True)
    try:
        for row, raised in ((1, None), (1, IntegrityError)):  # the second: a duplicate
            cursor = conn.cursor()
            assert isinstance(cursor, SQLiteCursor), version("eventsourcing")
            cursor.sqlite_cursor.execute("BEGIN IMMEDIATE")
            cursor.execute("CREATE TABLE IF NOT EXISTS t (x PRIMARY KEY)")
            error = None
            try:
                cursor.execute("INSERT INTO t VALUES (?)", (row,))
            except sqlite3.IntegrityError as e:
                error = e
            cursor.sqlite_cursor.close()
            if raised is None:
                SQLiteTransaction(conn, commit=True).__exit__(None, None, None)  # COMMIT
            else:
                assert error is not None
                with pytest.raises(raised):  # ROLLBACK, and the library's error
                    SQLiteTransaction(conn, commit=True).__exit__(type(error), error, None)
        with sqlite3.connect(tmp_path / "x.db") as other:
            assert other.execute("SELECT x FROM t").fetchall() == [(1,)]
    finally:
        pool.put_connection(conn)
        pool.close()
