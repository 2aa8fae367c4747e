"""PostgreSQL storage: the event recorder that writes the views in the same transaction.

Message bodies are JSON text with control characters escaped, so NUL survives (text
and jsonb columns reject a raw U+0000). Many rows go in as one `unnest` statement, so
a large `set` is one round trip, not thousands queued in psycopg's pipeline.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import (
    ApplicationRecorder,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import (
    PostgresAggregateRecorder,
    PostgresApplicationRecorder,
    PostgresDatastore,
    PostgresFactory,
)
from eventsourcing.utils import retry
from psycopg.sql import SQL

from .changes import MessageRow, view_changes
from .views import Reader, SQLViews

VIEW_TABLES = [
    "CREATE TABLE IF NOT EXISTS ledger_messages ("
    " session_id uuid NOT NULL, message_id bigint NOT NULL, valid_from bigint NOT NULL,"
    " valid_to bigint, status text NOT NULL, role text NOT NULL, tokens integer NOT NULL,"
    " tokens_joined integer NOT NULL, message text NOT NULL,"
    " PRIMARY KEY (session_id, message_id, valid_from))",
    "CREATE INDEX IF NOT EXISTS ledger_messages_live ON ledger_messages"
    " (session_id, status, message_id) INCLUDE (role, tokens, tokens_joined)"
    " WHERE valid_to IS NULL",
    "CREATE INDEX IF NOT EXISTS ledger_messages_ended ON ledger_messages"
    " (session_id, valid_to) WHERE valid_to IS NOT NULL",
    "CREATE TABLE IF NOT EXISTS ledger_sessions ("
    ' session_id uuid PRIMARY KEY, tenant text NOT NULL, session_key text COLLATE "C" NOT NULL,'
    " version bigint NOT NULL, message_count bigint NOT NULL, archived_count bigint NOT NULL,"
    " token_total bigint NOT NULL, created_at timestamptz NOT NULL,"
    " updated_at timestamptz NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_sessions_key"
    " ON ledger_sessions (tenant, session_key)",
    "CREATE TABLE IF NOT EXISTS ledger_timeline ("
    " session_id uuid NOT NULL, version bigint NOT NULL, recorded_at timestamptz NOT NULL,"
    " event_type text NOT NULL, actor text NOT NULL, reason text, idempotency_key text,"
    " request_digest text, message_count bigint NOT NULL, PRIMARY KEY (session_id, version))",
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_timeline_idempotency ON ledger_timeline"
    " (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
    "CREATE INDEX IF NOT EXISTS ledger_timeline_time ON ledger_timeline (session_id, recorded_at)",
]
ROWS_PER_STATEMENT = 2000


def _sql(statement: str) -> str:
    return statement.replace("?", "%s")


class PostgresLedgerRecorder(PostgresApplicationRecorder, SQLViews):
    """Stores events and their view rows atomically in one PostgreSQL database."""

    no_limit = None
    event_position = "notification_id"

    def __init__(self, datastore: PostgresDatastore, *, events_table_name: str = "ledger_events"):
        super().__init__(datastore, events_table_name=events_table_name)
        self.sql_create_statements.extend(SQL(s) for s in VIEW_TABLES)  # type: ignore[misc]
        self.rows_read = 0

    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def insert_events(
        self, stored_events: Sequence[StoredEvent], **kwargs: Any
    ) -> Sequence[int] | None:
        # One plain transaction, not the library's pipeline: a lost race then fails on the
        # events' primary key before any view statement is sent (psycopg's pipeline left
        # prepared statements unusable after such errors), and nothing is NOTIFYed,
        # because the views are written here rather than by a subscriber.
        batch = kwargs.get("ledger_batch")
        with self.datastore.get_connection() as conn, conn.transaction(), conn.cursor() as curs:
            self._lock_table(curs)
            PostgresAggregateRecorder._insert_stored_events(self, curs, stored_events)
            ids = self._fetch_ids_after_insert_events(curs, stored_events)
            if batch is not None:
                self.apply_changes(curs, view_changes(batch))
        return ids

    @contextmanager
    def _reading(self) -> Iterator[Reader]:
        with self.datastore.get_connection() as conn, conn.transaction(), conn.cursor() as curs:
            curs.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
            yield self._reader(curs)

    def _reader(self, cursor: Any) -> Reader:
        def read(sql: str, params: Sequence[Any]) -> list[Any]:
            cursor.execute(_sql(sql), params, prepare=True)
            return cursor.fetchall()  # type: ignore[no-any-return]

        return read

    @contextmanager
    def _write_transaction(self) -> Iterator[Any]:
        with self.datastore.get_connection() as conn, conn.transaction(), conn.cursor() as curs:
            curs.execute("LOCK TABLE ledger_events IN EXCLUSIVE MODE")
            yield curs

    @contextmanager
    def _stream(self, sql: str) -> Iterator[Iterator[Any]]:
        with (
            self.datastore.get_connection() as conn,
            conn.transaction(),
            conn.cursor(name="ledger_dump") as curs,
        ):
            curs.itersize = 2000
            curs.execute(sql)
            yield iter(curs)

    def _execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None:
        cursor.execute(_sql(sql), params, prepare=False)

    def _insert_rows(
        self, cursor: Any, sid: Any, version: int, status: str, rows: Sequence[MessageRow]
    ) -> None:
        for start in range(0, len(rows), ROWS_PER_STATEMENT):
            chunk = rows[start : start + ROWS_PER_STATEMENT]
            cursor.execute(
                "INSERT INTO ledger_messages (session_id, message_id, valid_from, valid_to,"
                " status, role, tokens, tokens_joined, message)"
                " SELECT %s, m.id, %s, NULL, %s, m.role, m.tokens, m.joined, m.body"
                " FROM unnest(%s::bigint[], %s::text[], %s::integer[], %s::integer[], %s::text[])"
                " AS m(id, role, tokens, joined, body)",
                (sid, version, status, [r.message_id for r in chunk], [r.role for r in chunk],
                 [r.tokens for r in chunk], [r.tokens_joined for r in chunk],
                 [r.body for r in chunk]),
            )  # fmt: skip

    def _sid(self, session_id: uuid.UUID) -> Any:
        return session_id

    def _time(self, value: datetime) -> Any:
        return value

    def _datetime(self, value: Any) -> datetime:
        return value.astimezone(UTC)  # type: ignore[no-any-return]


class PostgresLedgerFactory(PostgresFactory):
    """eventsourcing persistence module for the ledger on PostgreSQL."""

    def application_recorder(self) -> ApplicationRecorder:
        recorder = PostgresLedgerRecorder(self.datastore)
        if self.env_create_table():
            recorder.create_table()
        return recorder
