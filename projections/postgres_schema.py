"""The PostgreSQL views' tables, and the numbered migrations that make and change them.

`ledger_schema` holds the number of the last migration applied. Migration 1 is the
layout the views had when migrations were first numbered; it also converts stores made
before that to it. Each later change of a table is a new numbered migration appended
here, run once by `migrate` (under its advisory lock).
"""

from __future__ import annotations

from typing import Any

from .sql import COLUMNS_AT_NUMBERING, INDEXED_TYPE

LIVE_TABLE = (
    " session_id uuid NOT NULL, status text NOT NULL, message_id bigint NOT NULL,"
    " valid_from bigint NOT NULL, role text NOT NULL, tokens integer NOT NULL,"
    " tokens_joined integer NOT NULL, message text NOT NULL,"
    " PRIMARY KEY (session_id, status, message_id))"
)
LAYOUT_AT_NUMBERING = [
    f"CREATE TABLE IF NOT EXISTS ledger_messages ({LIVE_TABLE}",
    "CREATE TABLE IF NOT EXISTS ledger_ended_messages ("
    " session_id uuid NOT NULL, status text NOT NULL, message_id bigint NOT NULL,"
    " valid_from bigint NOT NULL, valid_to bigint NOT NULL, role text NOT NULL,"
    " tokens integer NOT NULL, tokens_joined integer NOT NULL, message text NOT NULL,"
    " PRIMARY KEY (session_id, status, message_id, valid_from))",
    "CREATE INDEX IF NOT EXISTS ledger_ended_messages_at ON ledger_ended_messages"
    " (session_id, valid_to)",
    # Stores made when one table held every row of the transcript, live or ended
    # (`valid_to` NULL while live), with an index of the live rows that every append also
    # wrote: the live rows go to a table keyed by (session, status, message id), the
    # ended ones to ledger_ended_messages; the old table goes, and its indexes with it.
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = 'ledger_messages'"
    " AND column_name = 'valid_to') THEN"
    f" CREATE TABLE ledger_messages_moved ({LIVE_TABLE};"
    f" INSERT INTO ledger_messages_moved ({COLUMNS_AT_NUMBERING}) SELECT {COLUMNS_AT_NUMBERING}"
    " FROM ledger_messages WHERE valid_to IS NULL;"
    f" INSERT INTO ledger_ended_messages ({COLUMNS_AT_NUMBERING}, valid_to)"
    f" SELECT {COLUMNS_AT_NUMBERING},"
    " valid_to FROM ledger_messages WHERE valid_to IS NOT NULL;"
    " DROP TABLE ledger_messages;"
    " ALTER TABLE ledger_messages_moved RENAME TO ledger_messages;"
    " ALTER TABLE ledger_messages RENAME CONSTRAINT ledger_messages_moved_pkey"
    " TO ledger_messages_pkey;"
    " END IF; END $$",
    "CREATE TABLE IF NOT EXISTS ledger_sessions ("
    ' session_id uuid PRIMARY KEY, tenant text NOT NULL, session_key text COLLATE "C" NOT NULL,'
    " created_at timestamptz NOT NULL)",
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_sessions_key"
    " ON ledger_sessions (tenant, session_key)",
    "CREATE TABLE IF NOT EXISTS ledger_timeline ("
    " session_id uuid NOT NULL, version bigint NOT NULL, recorded_at timestamptz NOT NULL,"
    " event_type text NOT NULL, actor text NOT NULL, reason text, idempotency_key text,"
    " request_digest text, message_count bigint NOT NULL, next_message_id bigint NOT NULL,"
    " chain bytea, archived_count bigint NOT NULL, token_total bigint NOT NULL,"
    " PRIMARY KEY (session_id, version))",
    # stores made before the timeline kept the hash chain (`rebuild` fills it in)
    "ALTER TABLE ledger_timeline ADD COLUMN IF NOT EXISTS chain bytea",
    # Stores made when the session row held the head (updated by every write): its counts
    # move onto each session's newest timeline row; older rows' totals stay NULL until
    # `rebuild` derives them.
    "DO $$ BEGIN IF EXISTS (SELECT 1 FROM information_schema.columns"
    " WHERE table_schema = current_schema() AND table_name = 'ledger_sessions'"
    " AND column_name = 'version') THEN"
    " ALTER TABLE ledger_timeline ADD COLUMN archived_count bigint,"
    " ADD COLUMN token_total bigint;"
    " UPDATE ledger_timeline t SET archived_count = s.archived_count,"
    " token_total = s.token_total FROM ledger_sessions s"
    " WHERE t.session_id = s.session_id AND t.version = s.version;"
    " ALTER TABLE ledger_sessions DROP COLUMN version, DROP COLUMN message_count,"
    " DROP COLUMN archived_count, DROP COLUMN token_total, DROP COLUMN updated_at;"
    " END IF; END $$",
    "CREATE UNIQUE INDEX IF NOT EXISTS ledger_timeline_idempotency ON ledger_timeline"
    " (session_id, idempotency_key) WHERE idempotency_key IS NOT NULL",
    # Dropped: time lookups binary-search the primary key (views.VERSION_AT).
    "DROP INDEX IF EXISTS ledger_timeline_time",
]
SCHEMA_TABLE = "CREATE TABLE IF NOT EXISTS ledger_schema (version integer NOT NULL)"
# Migration 2: each session's data key, wrapped by a master key (sealing.py).
DATA_KEYS = (
    "CREATE TABLE IF NOT EXISTS ledger_data_keys (session_id uuid PRIMARY KEY,"
    " master_key_id text NOT NULL, wrapped bytea NOT NULL, created_at timestamptz NOT NULL)",
)
# Migration 3: the access log (projections/access_log.py), kept beside the views: not
# derived from the events, so `rebuild` leaves it alone.
ACCESS_LOG = (
    "CREATE TABLE IF NOT EXISTS ledger_access_log ("
    " tenant text NOT NULL, seq bigint NOT NULL, recorded_at text NOT NULL,"
    " actor text NOT NULL, role text NOT NULL, action text NOT NULL, session_key text,"
    " parameters text NOT NULL, records bigint NOT NULL, chain bytea NOT NULL,"
    " PRIMARY KEY (tenant, seq))",
)
# Migration 4: the indexes of the audit search (projections/audit_search.py).
AUDIT_SEARCH_INDEXES = (
    "CREATE INDEX IF NOT EXISTS ledger_timeline_actor ON ledger_timeline"
    " (actor, recorded_at, session_id, version)",
    "CREATE INDEX IF NOT EXISTS ledger_timeline_type ON ledger_timeline"
    " (event_type, recorded_at, session_id, version)",
)
# Migration 5: every write now records a write id; only callers' idempotency keys (those
# with a request digest) are looked up by key, so only they are indexed.
CALLER_KEYS_INDEX = (
    "DROP INDEX IF EXISTS ledger_timeline_idempotency",
    "CREATE UNIQUE INDEX ledger_timeline_idempotency ON ledger_timeline"
    " (session_id, idempotency_key) WHERE request_digest IS NOT NULL",
)
# Migration 6: the streams view (`projections/streams_view.py`); the sweep of streams left
# open finds them by a partial index, without reading the ended ones.
STREAMS = (
    "CREATE TABLE IF NOT EXISTS ledger_streams ("
    " session_id uuid NOT NULL, stream_id text NOT NULL, opened_version bigint NOT NULL,"
    " role text NOT NULL, turn text, parent text, state text NOT NULL, text text NOT NULL,"
    " updated_at timestamptz NOT NULL, ended_version bigint, cause text,"
    " PRIMARY KEY (session_id, stream_id))",
    "CREATE INDEX IF NOT EXISTS ledger_streams_open ON ledger_streams (updated_at)"
    " WHERE state = 'open'",
)
# Migration 7: the access log's entries about one session, for its export
# (projections/access_log.py).
ACCESS_LOG_BY_SESSION = (
    "CREATE INDEX IF NOT EXISTS ledger_access_log_session ON ledger_access_log"
    " (tenant, session_key, seq)",
)
# Migration 8: the tenant feed (`projections/feed.py`): each event records the id of the
# transaction that wrote it (a default, so no statement names it), and the feed reads
# the events in (transaction, notification id) order. Rows stored before have none.
FEED = (
    "ALTER TABLE ledger_events ADD COLUMN IF NOT EXISTS tx xid8",
    "ALTER TABLE ledger_events ALTER COLUMN tx SET DEFAULT pg_current_xact_id()",
    "CREATE INDEX IF NOT EXISTS ledger_events_feed ON ledger_events (tx, notification_id)",
)
# Migration 9: a tenant's keys in the order their sessions were made (`session_keys`,
# LlamaIndex's `get_keys`), read from an index, a page at a time.
SESSIONS_BY_CREATION = (
    "CREATE INDEX IF NOT EXISTS ledger_sessions_created ON ledger_sessions"
    " (tenant, created_at, session_key)",
)
# Migration 10: the audit search's type index without the frequent writes' types
# (sql.UNINDEXED_TYPES): a put writes one index fewer.
TYPE_INDEX_PARTIAL = (
    "DROP INDEX IF EXISTS ledger_timeline_type",
    "CREATE INDEX ledger_timeline_type ON ledger_timeline"
    f" (event_type, recorded_at, session_id, version) WHERE {INDEXED_TYPE}",
)
# Migration 11: each message row marks whether its text is empty or ends in whitespace: a
# window is counted joined where such a message meets the next
# (domain.tokens.JoinedWindow). Rows stored before have NULL, and their texts are looked
# at when a window reaches them.
OPEN_END = tuple(
    f"ALTER TABLE {table} ADD COLUMN IF NOT EXISTS open_end boolean"
    for table in ("ledger_messages", "ledger_ended_messages")
)
MIGRATIONS: tuple[tuple[str, ...], ...] = (
    tuple(LAYOUT_AT_NUMBERING),
    DATA_KEYS,
    ACCESS_LOG,
    AUDIT_SEARCH_INDEXES,
    CALLER_KEYS_INDEX,
    STREAMS,
    ACCESS_LOG_BY_SESSION,
    FEED,
    SESSIONS_BY_CREATION,
    TYPE_INDEX_PARTIAL,
    OPEN_END,
)
LATEST = len(MIGRATIONS)


def migrate(c: Any) -> None:
    """Apply, in the cursor's transaction, the migrations not applied yet."""
    c.execute(SCHEMA_TABLE)
    current = schema_version(c)
    if current >= LATEST:
        return
    for number, statements in enumerate(MIGRATIONS, start=1):
        if number > current:
            for statement in statements:
                c.execute(statement)
    c.execute("DELETE FROM ledger_schema")
    c.execute("INSERT INTO ledger_schema (version) VALUES (%s)", (LATEST,))


def schema_version(c: Any) -> int:
    """The number of the last migration applied (0: none, or no ledger tables)."""
    c.execute("SELECT to_regclass('ledger_schema') IS NOT NULL")
    row = c.fetchone()
    if not (row and _first(row)):
        return 0
    c.execute("SELECT max(version) FROM ledger_schema")
    return int(_first(c.fetchone()) or 0)


def _first(row: Any) -> Any:
    return next(iter(row.values())) if isinstance(row, dict) else row[0]


def layout(c: Any) -> str:
    """The store's tables: `none` yet, `current` (to the latest migration), or `older`."""
    c.execute("SELECT to_regclass('ledger_events') IS NOT NULL")
    row = c.fetchone()
    if not (row and _first(row)):
        return "none"
    return "current" if schema_version(c) == LATEST else "older"
