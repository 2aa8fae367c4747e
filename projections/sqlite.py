"""SQLite storage: the event recorder that writes the views in the same transaction.

The embedded default (a file in WAL mode with synchronous=FULL) and the in-memory
store (`memory://`, a private in-memory database) both use it.
"""

from __future__ import annotations

import sqlite3
import uuid
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import (
    AggregateRecorder,
    ApplicationRecorder,
    ConnectionPoolClosedError,
    ConnectionUnavailableError,
    DatabaseError,
    DataError,
    IntegrityError,
    InterfaceError,
    InternalError,
    NotSupportedError,
    OperationalError,
    PersistenceError,
    ProgrammingError,
    StoredEvent,
)
from eventsourcing.sqlite import (
    SQLiteApplicationRecorder,
    SQLiteConnection,
    SQLiteConnectionPool,
    SQLiteCursor,
    SQLiteDatastore,
    SQLiteFactory,
)

from session_ledger.domain.integrity import chain_step
from session_ledger.domain.ports import ACTIVE, Append

from .changes import MessageRow, timeline_row, view_changes
from .views import ADDED_TOKENS, LIVE_COLUMNS, TIME_FORMAT, Reader, SQLViews, utc_text

CHAIN_HEADS = 10_000  # sessions whose last hash a recorder keeps (then it starts over)

VIEW_TABLES = [
    "CREATE TABLE IF NOT EXISTS ledger_messages ("
    " session_id TEXT NOT NULL, status TEXT NOT NULL, message_id INTEGER NOT NULL,"
    " valid_from INTEGER NOT NULL, role TEXT NOT NULL, tokens INTEGER NOT NULL,"
    " tokens_joined INTEGER NOT NULL, message TEXT NOT NULL,"
    " PRIMARY KEY (session_id, status, message_id)) WITHOUT ROWID",
    "CREATE TABLE IF NOT EXISTS ledger_ended_messages ("
    " session_id TEXT NOT NULL, status TEXT NOT NULL, message_id INTEGER NOT NULL,"
    " valid_from INTEGER NOT NULL, valid_to INTEGER NOT NULL, role TEXT NOT NULL,"
    " tokens INTEGER NOT NULL, tokens_joined INTEGER NOT NULL, message TEXT NOT NULL,"
    " PRIMARY KEY (session_id, status, message_id, valid_from)) WITHOUT ROWID",
    "CREATE INDEX IF NOT EXISTS ledger_ended_messages_at ON ledger_ended_messages"
    " (session_id, valid_to)",
    "CREATE TABLE IF NOT EXISTS ledger_sessions ("
    " session_id TEXT PRIMARY KEY, tenant TEXT NOT NULL, session_key TEXT NOT NULL,"
    " created_at TEXT NOT NULL) WITHOUT ROWID",
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_sessions_key"
    " ON ledger_sessions (tenant, session_key)",
    "CREATE TABLE IF NOT EXISTS ledger_timeline ("
    " session_id TEXT NOT NULL, version INTEGER NOT NULL, recorded_at TEXT NOT NULL,"
    " event_type TEXT NOT NULL, actor TEXT NOT NULL, reason TEXT, idempotency_key TEXT,"
    " request_digest TEXT, message_count INTEGER NOT NULL, next_message_id INTEGER NOT NULL,"
    " chain BLOB, archived_count INTEGER NOT NULL, token_total INTEGER NOT NULL,"
    " PRIMARY KEY (session_id, version)) WITHOUT ROWID",
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_timeline_idempotency ON ledger_timeline"
    " (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
    # Dropped: time lookups binary-search the primary key (views.VERSION_AT).
    "DROP INDEX IF EXISTS ledger_timeline_time",
]


MESSAGE_INSERT = f"INSERT INTO ledger_messages ({LIVE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"
# An append's timeline row: its token total is the one before it plus what it adds.
APPEND_TIMELINE_INSERT = SQLViews._timeline_insert(ADDED_TOKENS)


class SQLiteLedgerRecorder(SQLiteApplicationRecorder, SQLViews):
    """Stores events and their view rows atomically in one SQLite database."""

    # Without ANALYZE statistics SQLite may prefer the primary key (session_id = ?,
    # status = ?) to the index of end versions, and then read every ended row of the
    # session to find the few that ended at one version.
    ended_rows = "ledger_ended_messages INDEXED BY ledger_ended_messages_at"

    def __init__(self, datastore: SQLiteDatastore, events_table_name: str = "ledger_events"):
        super().__init__(datastore, events_table_name)
        self.rows_read = 0
        # session id -> (version, h_version) of the last write committed here: the next
        # append extends it without reading it back. An entry is only used for the
        # version right after it; a write elsewhere makes this process's next write to
        # the session fail on the events' primary key, reload, and miss the entry.
        self.chain_heads: dict[uuid.UUID, tuple[int, bytes]] = {}

    def construct_create_table_statements(self) -> list[str]:
        return [*super().construct_create_table_statements(), *VIEW_TABLES]

    def _create_table(self, c: SQLiteCursor) -> None:
        super()._create_table(c)
        # Stores made before the timeline kept the hash chain: add the column (`rebuild`
        # fills it in; until then `verify` reports those versions as unchained).
        if "chain" not in _columns(c, "ledger_timeline"):
            c.execute("ALTER TABLE ledger_timeline ADD COLUMN chain BLOB")
        if "version" in _columns(c, "ledger_sessions"):
            for statement in _HEAD_TO_TIMELINE:
                c.execute(statement)
        if "valid_to" in _columns(c, "ledger_messages"):
            for statement in _ENDED_ROWS_APART:
                c.execute(statement)

    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        if not isinstance(self.datastore.pool, _DurablePool):  # not made by the factory
            return super().insert_events(stored_events, **kwargs)
        written: list[tuple[uuid.UUID, int, bytes | None]] = []
        with self._writing() as db:
            cursor = db.cursor()
            try:
                ids = self._insert_events(cursor, stored_events, written=written, **kwargs)
            finally:
                cursor.close()
        for sid, version, chain in written:  # committed: the next append may extend it
            if chain is not None:
                self._remember_head(sid, version, chain)
        return ids

    @contextmanager
    def _writing(self) -> Iterator[sqlite3.Connection]:
        """The library's write transaction without its layers of context managers and
        cursor wrappers around every statement: the same pool and writer connection,
        BEGIN, the statements run on the connection yielded, COMMIT (or ROLLBACK), and
        the same exceptions."""
        pool = self.datastore.pool
        conn = pool.get_connection(is_writer=True)
        try:
            assert isinstance(conn, _LedgerConnection)
            db = conn.sqlite
            try:
                db.execute("BEGIN")
                yield db
                db.commit()
            except BaseException:
                db.rollback()
                raise
        except sqlite3.Error as e:
            raise _persistence_error(e) from e
        finally:
            pool.put_connection(conn)

    def _remember_head(self, sid: uuid.UUID, version: int, chain: bytes) -> None:
        """h_`version` of a session, committed here: its next append extends it unread."""
        if len(self.chain_heads) >= CHAIN_HEADS:
            self.chain_heads.clear()
        self.chain_heads[sid] = (version, chain)

    def holds_head(self, session_id: uuid.UUID, version: int) -> bool:
        """Whether this recorder holds the session's h_`version` and writes through the
        factory's connections (an append after it can take `append_rows`)."""
        head = self.chain_heads.get(session_id)
        return (
            head is not None
            and head[0] == version
            and isinstance(self.datastore.pool, _DurablePool)
        )

    def append_rows(self, record: StoredEvent, append: Append) -> bool:
        """Store one append of a session whose chain head this recorder holds: its event
        record, message rows and timeline row, in one transaction. The rows are those
        `view_changes` and `apply_changes` make for it, from the same pieces (the
        projection's `timeline_row`, `_insert_rows`, `_timeline_values`); a test compares
        what the two paths store.

        Returns False, storing nothing, when this recorder no longer holds h_{v-1} (another
        thread's write moved it since `holds_head`; the caller takes the general path).
        Raises IntegrityError when another writer took the version first.
        """
        sid, version = record.originator_id, record.originator_version
        assert isinstance(sid, uuid.UUID)  # the ledger's stream ids
        head = self.chain_heads.get(sid)  # read again: another thread may have moved it
        if head is None or head[0] != version - 1:
            return False
        chain = chain_step(head[1], sid, version, record.topic, record.state)
        first = append.first_message_id
        rows = [
            MessageRow(first + i, role, count.alone, count.joined, body)
            for i, (role, count, body) in enumerate(append.messages)
        ]
        t = timeline_row(
            append.event, append.message_count, append.next_message_id, append.archived_count,
            sum(r.tokens for r in rows), False,
        )  # fmt: skip
        key = sid.hex
        with self._writing() as db:
            db.execute(self.insert_events_statement, (key, version, record.topic, record.state))
            self._insert_rows(db, key, version, ACTIVE, rows)
            db.execute(
                APPEND_TIMELINE_INSERT,
                (*self._timeline_values(key, t, utc_text(t.recorded_at)), chain,
                 t.archived_count, *self._added_tokens(key, t)),
            )  # fmt: skip
        self._remember_head(sid, version, chain)
        return True

    def _insert_events(
        self, c: Any, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        ids = super()._insert_events(c, stored_events, **kwargs)
        batch = kwargs.get("ledger_batch")
        if batch is not None:
            head = self.chain_heads.get(batch.session_id)
            first = stored_events[0].originator_version
            before = head[1] if head is not None and head[0] == first - 1 else None
            chain = self.apply_changes(c, view_changes(batch), stored_events, before)
            written = kwargs.get("written")
            if written is not None:
                written.append((batch.session_id, stored_events[-1].originator_version, chain))
        return ids

    @contextmanager
    def rebuilding(self) -> Iterator[tuple[Any, Reader]]:
        with super().rebuilding() as rebuilt:
            yield rebuilt
        self.chain_heads.clear()  # the chain was stored anew: extend what is stored

    @contextmanager
    def _reading(self) -> Iterator[Reader]:
        with self.datastore.get_connection(commit=False) as conn:
            yield self._reader(conn.cursor())

    @contextmanager
    def snapshot(self) -> Iterator[Reader]:
        with self.datastore.transaction(commit=False) as c:
            yield self._reader(c)

    def _execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None:
        cursor.execute(sql, params)

    def _write_transaction(self) -> AbstractContextManager[Any]:
        return self.datastore.transaction(commit=True)

    def _reader(self, cursor: Any) -> Reader:
        return _Reader(cursor)

    @contextmanager
    def _stream(self, sql: str) -> Iterator[Iterator[Any]]:
        with self.datastore.transaction(commit=False) as c:
            c.execute(sql, ())
            yield iter(c.fetchone, None)

    def _insert_rows(
        self, cursor: Any, sid: Any, version: int, status: str, rows: Sequence[MessageRow]
    ) -> None:
        cursor.executemany(
            MESSAGE_INSERT,
            [(sid, status, r.message_id, version, r.role, r.tokens, r.tokens_joined, r.body)
             for r in rows],
        )  # fmt: skip

    def _sid(self, session_id: uuid.UUID) -> Any:
        return session_id.hex

    def _time(self, value: datetime) -> Any:
        return utc_text(value)

    def _datetime(self, value: Any) -> datetime:
        return datetime.strptime(value, TIME_FORMAT).replace(tzinfo=UTC)


# Stores made when the session row held the head (and was updated by every write): the
# head's counts move onto each session's newest timeline row, and the row keeps what never
# changes. Older timeline rows get NULL totals until `rebuild` derives them.
_HEAD_TO_TIMELINE = (
    "ALTER TABLE ledger_timeline ADD COLUMN archived_count INTEGER",
    "ALTER TABLE ledger_timeline ADD COLUMN token_total INTEGER",
    "UPDATE ledger_timeline SET (archived_count, token_total) = (SELECT s.archived_count,"
    " s.token_total FROM ledger_sessions s WHERE s.session_id = ledger_timeline.session_id)"
    " WHERE version = (SELECT s.version FROM ledger_sessions s"
    " WHERE s.session_id = ledger_timeline.session_id)",
    *(
        f"ALTER TABLE ledger_sessions DROP COLUMN {column}"
        for column in ("version", "message_count", "archived_count", "token_total", "updated_at")
    ),
)

# Stores made when one table held every row of the transcript, live or ended (`valid_to`
# NULL while live), with an index of the live rows that every append also wrote: the
# live rows go to a table keyed by (session, status, message id), the ended ones to
# `ledger_ended_messages`. The old table goes, and its indexes with it.
_ENDED_ROWS_APART = (
    VIEW_TABLES[0].replace("IF NOT EXISTS ledger_messages", "ledger_messages_moved"),
    f"INSERT INTO ledger_messages_moved ({LIVE_COLUMNS}) SELECT {LIVE_COLUMNS}"
    " FROM ledger_messages WHERE valid_to IS NULL",
    f"INSERT INTO ledger_ended_messages ({LIVE_COLUMNS}, valid_to) SELECT {LIVE_COLUMNS},"
    " valid_to FROM ledger_messages WHERE valid_to IS NOT NULL",
    "DROP TABLE ledger_messages",
    "ALTER TABLE ledger_messages_moved RENAME TO ledger_messages",
)


def _columns(c: Any, table: str) -> set[str]:
    c.execute(f"PRAGMA table_info({table})")
    return {row[1] for row in c.fetchall()}


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
        raw = getattr(self.cursor, "sqlite_cursor", self.cursor)  # the library's wrapper
        raw.row_factory = None
        try:
            raw.execute(sql, params)
            return raw.fetchall()  # type: ignore[no-any-return]
        finally:
            raw.row_factory = sqlite3.Row


_ERRORS: tuple[tuple[type[sqlite3.Error], type[PersistenceError]], ...] = (
    (sqlite3.IntegrityError, IntegrityError),
    (sqlite3.OperationalError, OperationalError),
    (sqlite3.InterfaceError, InterfaceError),
    (sqlite3.DataError, DataError),
    (sqlite3.InternalError, InternalError),
    (sqlite3.ProgrammingError, ProgrammingError),
    (sqlite3.NotSupportedError, NotSupportedError),
    (sqlite3.DatabaseError, DatabaseError),
)


def _persistence_error(error: sqlite3.Error) -> PersistenceError:
    """The eventsourcing exception the library raises for this sqlite3 one."""
    for raw, mapped in _ERRORS:
        if isinstance(error, raw):
            return mapped(error)
    return PersistenceError(error)


class _LedgerConnection(SQLiteConnection):
    def __init__(self, sqlite_conn: sqlite3.Connection, max_age: float | None):
        super().__init__(sqlite_conn=sqlite_conn, max_age=max_age)
        self.sqlite = sqlite_conn


class _DurablePool(SQLiteConnectionPool):
    """Connections in WAL mode that fsync every commit (synchronous=FULL) and keep their
    prepared statements (the library's connections cache one, so every statement of a
    write was compiled again).

    On a database file, writers (one at a time in a process, as the library's pool
    allows) share one connection that stays open, instead of the library's checkout of
    a pooled one (its semaphore, condition and bookkeeping) for every write.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._writer: SQLiteConnection | None = None

    def _create_connection(self) -> SQLiteConnection:
        try:
            conn = sqlite3.connect(
                self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                cached_statements=256,
                timeout=self.lock_timeout or 5,
            )
        except sqlite3.Error as e:
            raise InterfaceError(e) from e
        if not self.is_sqlite_memory_mode:
            conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.row_factory = sqlite3.Row
        return _LedgerConnection(sqlite_conn=conn, max_age=self.max_age)

    def get_connection(
        self, timeout: float | None = None, *, is_writer: bool | None = None
    ) -> SQLiteConnection:
        if is_writer is not True or self.is_sqlite_memory_mode:
            return super().get_connection(timeout, is_writer=is_writer)
        if self.closed:
            raise ConnectionPoolClosedError
        wait = self.pool_timeout if timeout is None else timeout
        if not self._writer_lock.acquire(timeout=wait):
            raise ConnectionUnavailableError("Timed out waiting for return of writer")
        try:
            if self._writer is None or self._writer.closed:
                self._writer = self._create_connection()
        except BaseException:
            self._writer_lock.release()
            raise
        return self._writer

    def put_connection(self, conn: SQLiteConnection) -> None:
        if conn is None or conn is not self._writer:
            super().put_connection(conn)
            return
        self._writer_lock.release()

    def close(self) -> None:
        super().close()
        # Wait for a write in progress (it fails on the closed pool's next checkout).
        locked = self._writer_lock.acquire(timeout=self.pool_timeout)
        try:
            if self._writer is not None:
                self._writer.close()
                self._writer = None
        finally:
            if locked:
                self._writer_lock.release()


class SQLiteLedgerFactory(SQLiteFactory):
    """eventsourcing persistence module for the ledger on SQLite."""

    def __init__(self, env: Any):
        super().__init__(env)
        pool = self.datastore.pool
        self.datastore.pool = _DurablePool(db_name=pool.db_name, lock_timeout=pool.lock_timeout)
        pool.close()

    def aggregate_recorder(self, purpose: str = "events") -> AggregateRecorder:
        recorder = self.aggregate_recorder_class(
            self.datastore, events_table_name=f"ledger_{purpose}"
        )
        if self.env_create_table():
            recorder.create_table()
        return recorder

    def application_recorder(self) -> ApplicationRecorder:
        recorder = SQLiteLedgerRecorder(self.datastore)
        if self.env_create_table():
            recorder.create_table()
        return recorder


def sqlite_tables_exist(db_name: str) -> bool:
    """Whether `migrate` has run on this database (since the transcript's ended rows
    got a table of their own)."""
    with sqlite3.connect(db_name, uri=True) as conn:
        names = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    return {"ledger_events", "ledger_snapshots", "ledger_ended_messages"} <= names
