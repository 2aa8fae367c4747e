"""PostgreSQL storage: the event recorder that writes the views in the same transaction,
and PostgreSQL's dialect of the views' statements.

Message bodies are JSON text with control characters escaped, so NUL survives (text
and jsonb columns reject a raw U+0000).
"""

from __future__ import annotations

import uuid
import weakref
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

import psycopg
from eventsourcing.persistence import (
    ApplicationRecorder,
    InterfaceError,
    Mapper,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import (
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresFactory,
)
from psycopg.rows import tuple_row
from psycopg_pool import PoolTimeout

from session_ledger.domain.integrity import chain_hashes, record_bytes
from session_ledger.domain.ports import ACTIVE, ReadRouting

from .async_bridge import in_bridge, retried
from .changes import InsertMessages, MessageRow, ViewChanges
from .dialect import Dialect
from .driver_errors import POSTGRES
from .feed import PostgresFeed
from .key_rows import DataKeyTable, SessionContent
from .postgres_append import MAX_VALUES_ROWS, MESSAGES_INSERT, append_sql, events_insert, to_psycopg
from .postgres_async import BridgingDatastore, LoopPool
from .postgres_partitions import partition_counts
from .postgres_schema import migrate
from .replicas import ReplicaSet, open_replicas
from .sealing import SealingFactory
from .sql import Reader
from .views import SQLViews, view_parts

# Every read walks a primary key in order and stops at its LIMIT. Where the planner's
# statistics say a session holds a few rows (none gathered yet, or most sessions short
# when they were), it priced a bitmap scan and a sort of the whole session below that,
# and a window of a 3,000-message session read all 3,000 rows (5 ms; 12 ms at 10,000).
# Without bitmap scans the key order is the cheapest plan at any estimate. (JIT off: a
# plan priced past a disabled step would be JIT-compiled, 200 ms.)
PLANNER_SETTINGS = "SET enable_bitmapscan = off; SET jit = off"


class PostgresDialect(Dialect):
    """PostgreSQL's statements and connections: pooled connections set up once for the
    ledger's statements, ids as uuid and times as timestamptz."""

    no_limit = None
    body_bytes = "octet_length(message)"  # from the stored size: no body detoasted
    event_position = "notification_id"

    def __init__(self, datastore: BridgingDatastore) -> None:
        self.datastore = datastore
        self._planned: weakref.WeakSet[Any] = weakref.WeakSet()  # connections set up

    @contextmanager
    def connection(self) -> Iterator[Any]:
        """A pooled connection, set once for the ledger's statements (PLANNER_SETTINGS).

        No connection within the pool's wait means the server is out of reach: nothing
        was sent, so StoreUnavailable (which no retry catches) ends the call at once
        instead of waiting again per retry."""
        if in_bridge():  # a call the event loop runs (postgres_async.py)
            with self.datastore.get_connection() as conn:
                yield conn
            return
        try:
            with self.datastore.get_connection() as conn:
                if conn not in self._planned:
                    conn.execute(PLANNER_SETTINGS)
                    self._planned.add(conn)
                yield conn
        except OperationalError as exc:
            if isinstance(exc.__cause__, PoolTimeout):
                raise POSTGRES.store(exc.__cause__) from exc
            raise

    def close(self) -> None:
        self.datastore.close()

    def drop_erased_keys(self) -> bool:
        """Vacuum the key table, so that its deleted row versions are freed (VACUUM takes
        no lock that readers or writers wait for; one that an older snapshot still sees
        waits for the next). The freed bytes may stay in their page until its space is
        reused: `VACUUM FULL ledger_data_keys` rewrites the table without them."""
        with self.connection() as conn, conn.cursor() as curs:  # (autocommit connections)
            curs.execute("VACUUM ledger_data_keys")
        return True

    def drop_old_bytes(self) -> str:
        """After content was rewritten in place (encrypt-existing): what the operator must
        do, since only a table rewrite that locks each table drops the old row versions."""
        return (
            "PostgreSQL keeps the rows' old versions in its files until they are reused: "
            "run VACUUM FULL ledger_events, ledger_messages, ledger_ended_messages, "
            "ledger_streams when writers can wait (each table is locked while rewritten)"
        )

    @contextmanager
    def reading(self) -> Iterator[Reader]:
        with self.connection() as conn, conn.cursor() as curs:
            yield self.reader(curs)

    @contextmanager
    def reading_past(self) -> Iterator[Reader]:
        # A past version's rows are bounded by a message id range too, which the planner
        # also thought cheaper to sort than to read in key order (50 ms at 100,000).
        with self.connection() as conn, conn.transaction(), conn.cursor() as curs:
            curs.execute("SET LOCAL enable_sort = off")
            yield self.reader(curs)

    @contextmanager
    def snapshot(self) -> Iterator[Reader]:
        with self.connection() as conn, conn.transaction(), conn.cursor() as curs:
            curs.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield self.reader(curs)

    @contextmanager
    def appending(self) -> Iterator[Any]:
        try:
            with self.connection() as conn, conn.transaction(), conn.cursor() as curs:
                yield curs
        except psycopg.errors.UniqueViolation as e:
            raise POSTGRES.library(e) from e

    def reader(self, cursor: Any) -> Reader:
        return PostgresReader(cursor)

    @contextmanager
    def write_transaction(self) -> Iterator[Any]:
        with self.connection() as conn, conn.transaction(), conn.cursor() as curs:
            curs.execute("LOCK TABLE ledger_events IN EXCLUSIVE MODE")
            yield curs

    @contextmanager
    def committing(self) -> Iterator[Any]:
        # Not `write_transaction`: its table lock would queue every writer behind a key.
        with self.connection() as conn, conn.transaction(), conn.cursor() as curs:
            yield curs

    @contextmanager
    def stream(self, sql: str) -> Iterator[Iterator[Any]]:
        with (
            self.connection() as conn,
            conn.transaction(),
            conn.cursor(name="ledger_dump") as curs,
        ):
            curs.itersize = 2000
            curs.execute(sql)
            yield iter(curs)

    def execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None:
        cursor.execute(to_psycopg(sql), params, prepare=False)

    def insert_rows(
        self, cursor: Any, sid: Any, version: int, status: str, rows: Sequence[MessageRow]
    ) -> None:
        cursor.execute(MESSAGES_INSERT, message_arrays(sid, version, status, rows))

    def sid(self, session_id: uuid.UUID) -> Any:
        return session_id

    def time(self, value: datetime) -> Any:
        return value

    def datetime(self, value: Any) -> datetime:
        return value.astimezone(UTC)  # type: ignore[no-any-return]


def message_arrays(
    sid: Any, version: int, status: str, rows: Sequence[MessageRow]
) -> tuple[Any, ...]:
    """The parameters of MESSAGES_INSERT: the rows as a handful of arrays."""
    return (
        sid, status, version, [r.message_id for r in rows], [r.role for r in rows],
        [r.tokens for r in rows], [r.tokens_joined for r in rows], [r.body for r in rows],
        [r.open_end for r in rows],
    )  # fmt: skip


def postgres_views(
    dialect: PostgresDialect, content: SessionContent, read_routing: ReadRouting | None = None
) -> SQLViews:
    """The views of a PostgreSQL store, made of their parts."""
    return SQLViews(view_parts(dialect, content, PostgresFeed(dialect)), read_routing)


class PostgresLedgerRecorder(PostgresApplicationRecorder):
    """Stores events and their view rows atomically in one PostgreSQL database: the
    library's recorder, and the views (`views`) written in its transaction."""

    datastore: BridgingDatastore  # type: ignore[assignment]

    def __init__(
        self,
        dialect: PostgresDialect,
        views: SQLViews,
        replicas: ReplicaSet | None = None,
        *,
        events_table_name: str = "ledger_events",
    ) -> None:
        super().__init__(dialect.datastore, events_table_name=events_table_name)  # type: ignore[arg-type]
        self.dialect = dialect
        self.views = views
        self.replicas = replicas  # told of each commit (read-your-writes)
        self.loop_pool: LoopPool = dialect.datastore.loop_pool
        self._view_changes = views.content.view_changes
        self._writer = views.writer

    def select_events(self, originator_id: uuid.UUID | str, **kwargs: Any) -> Sequence[StoredEvent]:
        # The library's read, after the session's cached data key is checked (key_rows.py)
        self.views.content.recheck(originator_id)
        events: Sequence[StoredEvent] = super().select_events(originator_id, **kwargs)
        return events

    def create_table(self) -> None:
        """The events' table (the library's), then the views' migrations. Once
        partitioned (postgres_partitions.py), the events' table is left as it is: the
        library's unique index of notification ids cannot be made on it, even by a
        `CREATE ... IF NOT EXISTS` that would find it there."""
        with self.dialect.connection() as conn, conn.cursor() as curs:
            partitioned = partition_counts(curs).get("ledger_events", 0) > 0
        if partitioned:
            self.datastore.register_type_adapters()
        else:
            super().create_table()
        with self.dialect.connection() as conn, conn.transaction(), conn.cursor() as curs:
            migrate(curs)

    @retried((InterfaceError, OperationalError), attempts=10, wait=0.2)  # as the library's
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        # No table lock and no NOTIFY: the library takes `LOCK TABLE ... EXCLUSIVE` so that
        # subscribers tailing the log never skip an id that commits late; nothing here
        # tails the log (views are written in this transaction), and the lock would make
        # every writer of every session wait in one line. Per-session order and
        # integrity rest on the (originator_id, originator_version) primary key.
        batch = kwargs.get("ledger_batch")
        changes = self._view_changes(batch) if batch is not None else None
        events = [
            v for e in stored_events
            for v in (e.originator_id, e.originator_version, e.topic, e.state)
        ]  # fmt: skip
        with self.dialect.connection() as conn:
            if changes is not None and all(isinstance(c, InsertMessages) for c in changes.changes):
                # An append (the common write) is ONE statement: one round trip, one commit.
                # Prepared, with binary parameters: the event's state and the record the
                # chain hashes are bytea, which text format sends hex-encoded.
                sql, params = self._append(stored_events, events, changes)
                with conn.cursor(row_factory=tuple_row) as curs:
                    curs.execute(sql, params, prepare=True, binary=True)
                    ids = [r[0] for r in curs.fetchall()]
            else:
                with conn.transaction(), conn.cursor() as curs:
                    curs.execute(events_insert(len(stored_events)), events)
                    ids = [r["notification_id"] for r in curs.fetchall()]
                    if changes is not None:
                        self._writer.apply_changes(curs, changes, stored_events)
        after_commit = self.views.after_commit
        if after_commit is not None and batch is not None:
            after_commit(batch.session_id, batch.tenant)
        if self.replicas is not None and changes is not None:
            self.replicas.written(changes.session_id, stored_events[-1].originator_version)
        return ids

    def _append(
        self, stored: Sequence[StoredEvent], events: list[Any], changes: ViewChanges
    ) -> tuple[str, list[Any]]:
        """The one statement of an append, and its parameters."""
        writer = self._writer
        sid, version = changes.session_id, stored[-1].originator_version
        rows = [r for c in changes.changes if isinstance(c, InsertMessages) for r in c.rows]
        times = writer.times(changes)
        timeline = writer.timeline_params(changes, times, sid)
        params = [*events]
        first = stored[0].originator_version
        chained = not changes.started  # its one event extends the stored session
        if not chained:
            params += writer.session_params(changes, times)
        if len(rows) <= MAX_VALUES_ROWS:  # scalar parameters: cheapest to send
            messages: int | None = len(rows)
            for r in rows:
                params += (sid, ACTIVE, r.message_id, version, r.role, r.tokens,
                           r.tokens_joined, r.body, r.open_end)  # fmt: skip
        else:  # many rows: a handful of arrays (a statement takes at most 65,535 values)
            messages = None
            params += message_arrays(sid, version, ACTIVE, rows)
        if chained:  # h_0 is known when the write starts the session, else it is stored
            s = stored[0]
            chains: list[tuple[Any, ...]] = [
                (sid, first - 1, record_bytes(changes.session_id, first, s.topic, s.state))
            ]
        else:
            records = ((s.originator_version, s.topic, s.state) for s in stored)
            chains = [(h,) for h in chain_hashes(changes.session_id, records)]
        totals = writer.token_totals(changes, sid)
        for row, chain, t, (_, token_params) in zip(
            timeline, chains, changes.timeline, totals, strict=True
        ):
            params += (*row, *chain, t.archived_count, *token_params)
        token_sql = tuple(tokens for tokens, _ in totals)
        return append_sql(len(stored), messages, chained, token_sql), params


class PostgresReader:
    """Runs statements on one cursor (prepared); rows are dicts, or plain tuples."""

    __slots__ = ("cursor",)

    def __init__(self, cursor: Any) -> None:
        self.cursor = cursor

    def __call__(self, sql: str, params: Sequence[Any]) -> list[Any]:
        self.cursor.execute(to_psycopg(sql), params, prepare=True)
        return self.cursor.fetchall()  # type: ignore[no-any-return]

    def tuples(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        factory = self.cursor.row_factory
        self.cursor.row_factory = tuple_row
        try:
            return self(sql, params)
        finally:
            self.cursor.row_factory = factory


class PostgresLedgerFactory(SealingFactory, PostgresFactory):
    """eventsourcing persistence module for the ledger on PostgreSQL."""

    replicas: ReplicaSet | None = None
    datastore: BridgingDatastore  # type: ignore[assignment]

    def __init__(self, env: Any) -> None:
        super().__init__(env)
        # Every recorder made here (the snapshots' too) waits on the loop under `bridged`.
        self.datastore = BridgingDatastore(self.datastore, PLANNER_SETTINGS)  # type: ignore[arg-type]
        self.dialect = PostgresDialect(self.datastore)

    def mapper(self, transcoder: Any = None, mapper_class: Any = None) -> Mapper[Any]:
        transcoder = transcoder or self.transcoder()
        plain = super().mapper(transcoder, mapper_class)
        return self.sealing_mapper(DataKeyTable(self.dialect), transcoder, plain)

    def application_recorder(self) -> ApplicationRecorder:
        table = DataKeyTable(self.dialect)
        content = SessionContent(self.data_keys(table, self.transcoder()), self.keyless(table))
        parts = view_parts(self.dialect, content, PostgresFeed(self.dialect))

        def standby_views(datastore: PostgresDatastore) -> SQLViews:
            # A standby's reads on a pool of its own; its data keys are the primary's.
            return postgres_views(
                PostgresDialect(BridgingDatastore(datastore, PLANNER_SETTINGS)), content
            )

        # The standbys fall back to views over the same parts without the routing.
        self.replicas = open_replicas(
            self.env, SQLViews(parts), standby_views, pool_size=self.datastore.pool.max_size
        )
        recorder = PostgresLedgerRecorder(self.dialect, SQLViews(parts, self.replicas),
                                          self.replicas)  # fmt: skip
        if self.env_create_table():
            recorder.create_table()
        return recorder

    def close(self) -> None:
        if self.replicas is not None:
            self.replicas.close()
        self.datastore.loop_pool.close()
        super().close()
