"""SQLite storage: the event recorder that writes the views in the same transaction, and
SQLite's dialect of the views' statements.

The embedded default (a file in WAL mode with synchronous=FULL) and the in-memory
store (`memory://`, a private in-memory database) both use it. Tables: `sqlite_schema.py`.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, closing, contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    Mapper,
    StoredEvent,
)
from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteCursor,
    SQLiteDatastore,
    SQLiteFactory,
)

from .changes import MessageRow
from .dialect import Dialect
from .driver_errors import SQLITE
from .eventsourcing_compat import SQLITE_LOCK_WAIT_SECONDS, DurableSQLitePool
from .feed import SQLiteFeed
from .group_commit import GroupCommit
from .key_rows import DataKeyTable, SessionContent
from .sealing import SealingFactory
from .sql import LIVE_COLUMNS, TIME_FORMAT, Reader, utc_text
from .sqlite_schema import LATEST, migrate, schema_version
from .views import SQLViews, view_parts
from .wal_checkpoints import WalCheckpoints
from .write_turns import WriteTransaction, WriteTurns, check_may_wait, lock_file_of

MESSAGE_INSERT = f"INSERT INTO ledger_messages ({LIVE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"

# The longest an erasure's WAL truncation holds new writers back (drop_erased_keys).
ERASURE_CHECKPOINT_WAIT_MS = 250


class SQLiteDialect(Dialect):
    """SQLite's statements and connections: writers take turns (`write_turns.py`), ids are
    hex text, times UTC text."""

    # Without ANALYZE statistics SQLite may prefer the primary key (session_id = ?,
    # status = ?) to the index of end versions, and then read every ended row of the
    # session to find the few that ended at one version.
    ended_rows = "ledger_ended_messages INDEXED BY ledger_ended_messages_at"

    def __init__(
        self, datastore: SQLiteDatastore, turns: WriteTurns, checkpoints: bool = False
    ) -> None:
        """`checkpoints`: the WAL is checkpointed by the write transactions (its pool's
        connections do not checkpoint on commit: `DurableSQLitePool`)."""
        self.datastore = datastore
        self.turns = turns
        self.checkpoints = WalCheckpoints(self.reading) if checkpoints else None

    def close(self) -> None:
        self.datastore.close()

    def drop_erased_keys(self) -> bool:
        """Copy the WAL into the file and empty it (a TRUNCATE checkpoint): its older
        frames still hold the deleted key row, whose page was zeroed where the row was
        (`secure_delete`). The checkpoint holds new writers back while it waits for
        readers, so it waits `ERASURE_CHECKPOINT_WAIT_MS` at most; false if a reader (or
        a writer) kept the WAL from being emptied meanwhile."""
        if self.checkpoints is None:  # (in memory: no file)
            return True
        with self.reading() as read:
            ((waited,),) = read("PRAGMA busy_timeout", ())
            read(f"PRAGMA busy_timeout = {ERASURE_CHECKPOINT_WAIT_MS}", ())
            try:
                (busy, _, _), *_ = read("PRAGMA wal_checkpoint(TRUNCATE)", ())
            finally:
                read(f"PRAGMA busy_timeout = {int(waited)}", ())
        return not busy

    def drop_old_bytes(self) -> str:
        """After content was rewritten in place (encrypt-existing): rebuild the file, so no
        freed page keeps the bytes it held, and empty the WAL. What was done."""
        name = self.datastore.pool.db_name
        with closing(sqlite3.connect(name, uri=True, isolation_level=None)) as conn:
            conn.execute("VACUUM")
            busy = conn.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchone()[0]
        if busy:
            return (
                "the database file was rebuilt (VACUUM), but a reader kept its WAL from "
                "being emptied: run `PRAGMA wal_checkpoint(TRUNCATE)` when it is idle"
            )
        return "the database file was rebuilt (VACUUM) and its WAL emptied"

    @contextmanager
    def reading(self) -> Iterator[Reader]:
        with self.datastore.get_connection(commit=False) as conn, conn.cursor() as raw:
            yield _Reader(raw)

    @contextmanager
    def snapshot(self) -> Iterator[Reader]:
        with self.datastore.transaction(commit=False) as c, c as raw:
            yield _Reader(raw)

    def execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None:
        cursor.execute(sql, params)

    def taking_turn(self) -> AbstractContextManager[Any]:
        """A write transaction, begun once this writer's turn came (write_turns.py)."""
        return WriteTransaction(self.datastore.pool, self.turns)

    @contextmanager
    def write_transaction(self) -> Iterator[Any]:
        with self.taking_turn() as c, c as raw:
            yield raw
        if self.checkpoints is not None:  # (the turn given back)
            self.checkpoints.committed()

    def appending(self) -> AbstractContextManager[Any]:
        return self.write_transaction()

    def reader(self, cursor: Any) -> Reader:
        return _Reader(cursor)

    @contextmanager
    def stream(self, sql: str) -> Iterator[Iterator[Any]]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, ())
            yield iter(c.fetchone, None)

    def insert_rows(
        self, cursor: Any, sid: Any, version: int, status: str, rows: Sequence[MessageRow]
    ) -> None:
        cursor.executemany(
            MESSAGE_INSERT,
            [(sid, status, r.message_id, version, r.role, r.tokens, r.tokens_joined, r.body,
              r.open_end) for r in rows],
        )  # fmt: skip

    def sid(self, session_id: Any) -> Any:
        return session_id.hex

    def time(self, value: datetime) -> Any:
        return utc_text(value)

    def datetime(self, value: Any) -> datetime:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC)


def sqlite_views(dialect: SQLiteDialect, content: SessionContent) -> SQLViews:
    """The views of a SQLite store, made of their parts."""
    return SQLViews(view_parts(dialect, content, SQLiteFeed(dialect)))


class SQLiteLedgerRecorder(SQLiteApplicationRecorder):
    """Stores events and their view rows atomically in one SQLite database: the library's
    recorder, and the views (`views`) written in its transaction."""

    def __init__(
        self, dialect: SQLiteDialect, views: SQLViews, events_table_name: str = "ledger_events"
    ) -> None:
        super().__init__(dialect.datastore, events_table_name)
        self.dialect = dialect
        self.views = views
        self.turns = dialect.turns
        self._view_changes = views.content.view_changes
        self._apply_changes = views.writer.apply_changes
        self._chains_ahead = views.writer.chains_ahead
        # SQLite has one writer at a time: writers queued behind a commit share the next.
        self.group_commit = GroupCommit(
            dialect.taking_turn,
            lambda cursor, statement: cursor.execute(statement),
            SQLITE.library,  # sqlite3's errors as the library's transaction raises them
            before_queueing=check_may_wait,  # (a write on the event loop does not queue)
        )

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        # The library's insert_events (its transaction around `_insert_events`), in a
        # transaction it may share with other writers (group_commit.py).
        # No notification ids returned: nothing reads them (the ledger reads its feed from
        # the table), and with none the library's `EventStore.put` builds no Recording
        # and Notification objects.
        # The rows (sealed, with a master key) and the chain hashes are made before the
        # write lock is taken, which every other writer of the file waits for: they need
        # nothing the store holds (the chain, h_{v-1}: checked in the transaction).
        batch = kwargs.get("ledger_batch")
        if batch is not None:
            ahead = self._chains_ahead(batch.session_id, stored_events)
            kwargs["ledger_rows"] = (self._view_changes(batch), ahead)
        self.group_commit.run(lambda c: self._insert_events(c, stored_events, **kwargs))
        checkpoints = self.dialect.checkpoints
        if checkpoints is not None:  # (the turn and the commit given back)
            checkpoints.committed(sum([len(s.state) for s in stored_events]))
        after_commit = self.views.after_commit
        if after_commit is not None and batch is not None:
            after_commit(batch.session_id, batch.tenant)
        return None

    def select_events(self, originator_id: uuid.UUID | str, **kwargs: Any) -> Sequence[StoredEvent]:
        # The library's read, after the session's cached data key is checked (key_rows.py)
        self.views.content.recheck(originator_id)
        return super().select_events(originator_id, **kwargs)

    def create_table(self) -> None:
        """The events' table (the library's), then the views' migrations."""
        super().create_table()
        # BEGIN IMMEDIATE: a migration that began by reading could not then write once
        # another process's migration committed (SQLite refuses the upgrade at once).
        with self.datastore.get_connection(commit=True) as conn, conn.cursor() as c:
            c.execute("BEGIN IMMEDIATE")
            try:
                migrate(c)
            except BaseException:
                c.execute("ROLLBACK")
                raise
            c.execute("COMMIT")

    def _insert_events(
        self, c: SQLiteCursor, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        # The library's hook inside its write transaction: the events, then their rows
        # (`ledger_rows`: as `insert_events` made them before the transaction).
        ids = super()._insert_events(c, stored_events, **kwargs)
        batch = kwargs.get("ledger_batch")
        if batch is not None:
            changes, ahead = kwargs.get("ledger_rows") or (self._view_changes(batch), None)
            self._apply_changes(c, changes, stored_events, ahead=ahead)
        return ids


class _Reader:
    """Runs statements on one cursor; rows are sqlite3.Row (by name or position), or plain
    tuples."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def __call__(self, sql: str, params: Sequence[Any]) -> list[Any]:
        self.cursor.execute(sql, params)
        return list(self.cursor.fetchall())

    def tuples(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Rows as plain tuples: a sqlite3.Row per row of a 10,000-message history cost
        2-3 ms."""
        raw = self.cursor
        raw.row_factory = None
        try:
            raw.execute(sql, params)
            return raw.fetchall()  # type: ignore[no-any-return]
        finally:
            raw.row_factory = sqlite3.Row


class SQLiteLedgerFactory(SealingFactory, SQLiteFactory):
    """eventsourcing persistence module for the ledger on SQLite."""

    def __init__(self, env: Any):
        super().__init__(env)
        pool = self.datastore.pool
        self.datastore.pool = DurableSQLitePool(
            db_name=pool.db_name, lock_timeout=pool.lock_timeout
        )
        pool.close()
        pool = self.datastore.pool
        # The store's write turns (a lock file beside the database), closed with it.
        self.turns = WriteTurns(
            None if pool.is_sqlite_memory_mode else lock_file_of(pool.db_name),
            pool.lock_timeout or SQLITE_LOCK_WAIT_SECONDS,
        )
        self.dialect = SQLiteDialect(
            self.datastore, self.turns, checkpoints=not pool.is_sqlite_memory_mode
        )

    def close(self) -> None:
        self.turns.close()
        super().close()

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        recorder = self.aggregate_recorder_class(
            self.datastore, events_table_name=f"ledger_{purpose}"
        )
        if self.env_create_table():
            recorder.create_table()
        return recorder

    def mapper(self, transcoder: Any = None, mapper_class: Any = None) -> Mapper[Any]:
        transcoder = transcoder or self.transcoder()
        plain = super().mapper(transcoder, mapper_class)
        return self.sealing_mapper(DataKeyTable(self.dialect), transcoder, plain)

    def application_recorder(self) -> ApplicationRecorder:
        table = DataKeyTable(self.dialect)
        content = SessionContent(self.data_keys(table, self.transcoder()), self.keyless(table))
        recorder = SQLiteLedgerRecorder(self.dialect, sqlite_views(self.dialect, content))
        if self.env_create_table():
            recorder.create_table()
        return recorder


def sqlite_layout(db_name: str) -> str:
    """This database's tables: `none` yet, `current` (made by `migrate` to the code's latest
    migration), or `older` (a layout `migrate` moves)."""
    if not Path(db_name).exists():
        return "none"
    with closing(sqlite3.connect(db_name, uri=True)) as conn:
        c = conn.cursor()
        c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'ledger_events'")
        if c.fetchone() is None:
            return "none"
        return "current" if schema_version(c) == LATEST else "older"
