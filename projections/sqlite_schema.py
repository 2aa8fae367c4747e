"""The SQLite views' tables, and the numbered migrations that make and change them.

`ledger_schema` holds the number of the last migration applied. Migration 1 is the
layout the views had when migrations were first numbered; it also converts stores made
before that (found by their columns, once) to it. Each later change of a table is a new
numbered migration appended here, run once by `migrate`.
"""

from __future__ import annotations

from typing import Any

from .sql import COLUMNS_AT_NUMBERING, INDEXED_TYPE

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
]
SCHEMA_TABLE = "CREATE TABLE IF NOT EXISTS ledger_schema (version INTEGER NOT NULL)"

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
# NULL while live): the live rows go to a table keyed by (session, status, message id),
# the ended ones to `ledger_ended_messages`.
_ENDED_ROWS_APART = (
    VIEW_TABLES[0].replace("IF NOT EXISTS ledger_messages", "ledger_messages_moved"),
    f"INSERT INTO ledger_messages_moved ({COLUMNS_AT_NUMBERING})"
    f" SELECT {COLUMNS_AT_NUMBERING} FROM ledger_messages WHERE valid_to IS NULL",
    f"INSERT INTO ledger_ended_messages ({COLUMNS_AT_NUMBERING}, valid_to)"
    f" SELECT {COLUMNS_AT_NUMBERING},"
    " valid_to FROM ledger_messages WHERE valid_to IS NOT NULL",
    "DROP TABLE ledger_messages",
    "ALTER TABLE ledger_messages_moved RENAME TO ledger_messages",
)


def _layout_at_numbering(c: Any) -> None:
    """Migration 1: the views' tables, from nothing or from a store made before."""
    for statement in VIEW_TABLES:
        c.execute(statement)
    if "chain" not in _columns(c, "ledger_timeline"):
        c.execute("ALTER TABLE ledger_timeline ADD COLUMN chain BLOB")
    if "version" in _columns(c, "ledger_sessions"):
        for statement in _HEAD_TO_TIMELINE:
            c.execute(statement)
    if "valid_to" in _columns(c, "ledger_messages"):
        for statement in _ENDED_ROWS_APART:
            c.execute(statement)
    c.execute("DROP INDEX IF EXISTS ledger_timeline_time")


def _data_keys(c: Any) -> None:
    """Migration 2: each session's data key, wrapped by a master key (sealing.py)."""
    c.execute(
        "CREATE TABLE IF NOT EXISTS ledger_data_keys (session_id TEXT PRIMARY KEY,"
        " master_key_id TEXT NOT NULL, wrapped BLOB NOT NULL, created_at TEXT NOT NULL)"
        " WITHOUT ROWID"
    )


def _access_log(c: Any) -> None:
    """Migration 3: the access log (projections/access_log.py), kept beside the views:
    not derived from the events, so `rebuild` leaves it alone."""
    c.execute(
        "CREATE TABLE IF NOT EXISTS ledger_access_log ("
        " tenant TEXT NOT NULL, seq INTEGER NOT NULL, recorded_at TEXT NOT NULL,"
        " actor TEXT NOT NULL, role TEXT NOT NULL, action TEXT NOT NULL, session_key TEXT,"
        " parameters TEXT NOT NULL, records INTEGER NOT NULL, chain BLOB NOT NULL,"
        " PRIMARY KEY (tenant, seq)) WITHOUT ROWID"
    )


# Migration 4: the indexes of the audit search (projections/audit_search.py).
AUDIT_SEARCH_INDEXES = (
    "CREATE INDEX IF NOT EXISTS ledger_timeline_actor ON ledger_timeline"
    " (actor, recorded_at, session_id, version)",
    "CREATE INDEX IF NOT EXISTS ledger_timeline_type ON ledger_timeline"
    " (event_type, recorded_at, session_id, version)",
)


def _audit_search(c: Any) -> None:
    for statement in AUDIT_SEARCH_INDEXES:
        c.execute(statement)


# Migration 5: every write now records a write id; only callers' idempotency keys (those
# with a request digest) are looked up by key, so only they are indexed.
CALLER_KEYS_INDEX = (
    "DROP INDEX IF EXISTS ledger_timeline_idempotency",
    "CREATE UNIQUE INDEX ledger_timeline_idempotency ON ledger_timeline"
    " (session_id, idempotency_key) WHERE request_digest IS NOT NULL",
)


def _caller_keys_index(c: Any) -> None:
    for statement in CALLER_KEYS_INDEX:
        c.execute(statement)


STREAMS_TABLE = (
    "CREATE TABLE IF NOT EXISTS ledger_streams ("
    " session_id TEXT NOT NULL, stream_id TEXT NOT NULL, opened_version INTEGER NOT NULL,"
    " role TEXT NOT NULL, turn TEXT, parent TEXT, state TEXT NOT NULL, text TEXT NOT NULL,"
    " updated_at TEXT NOT NULL, ended_version INTEGER, cause TEXT,"
    " PRIMARY KEY (session_id, stream_id)) WITHOUT ROWID",
    # The sweep of streams left open finds them without reading the ended ones.
    "CREATE INDEX IF NOT EXISTS ledger_streams_open ON ledger_streams (updated_at)"
    " WHERE state = 'open'",
)


def _streams(c: Any) -> None:
    """Migration 6: the streams view (`projections/streams_view.py`)."""
    for statement in STREAMS_TABLE:
        c.execute(statement)


# The access log's entries about one session, for its export (projections/access_log.py).
ACCESS_LOG_BY_SESSION = (
    "CREATE INDEX IF NOT EXISTS ledger_access_log_session ON ledger_access_log"
    " (tenant, session_key, seq)",
)


def _access_log_by_session(c: Any) -> None:
    for statement in ACCESS_LOG_BY_SESSION:
        c.execute(statement)


# A tenant's keys in the order their sessions were made (`session_keys`, LlamaIndex's
# `get_keys`), read from an index, a page at a time.
SESSIONS_BY_CREATION = (
    "CREATE INDEX IF NOT EXISTS ledger_sessions_created ON ledger_sessions"
    " (tenant, created_at, session_key)",
)


def _sessions_by_creation(c: Any) -> None:
    """Migration 8."""
    for statement in SESSIONS_BY_CREATION:
        c.execute(statement)


# The audit search's type index without the frequent writes' types (sql.UNINDEXED_TYPES):
# a put writes one b-tree fewer. A search by one of them alone reads the timeline whole.
TYPE_INDEX_PARTIAL = (
    "DROP INDEX IF EXISTS ledger_timeline_type",
    "CREATE INDEX ledger_timeline_type ON ledger_timeline"
    f" (event_type, recorded_at, session_id, version) WHERE {INDEXED_TYPE}",
)


def _type_index_partial(c: Any) -> None:
    """Migration 9."""
    for statement in TYPE_INDEX_PARTIAL:
        c.execute(statement)


# Each message row marks whether its text is empty or ends in whitespace: a window is
# counted joined where such a message meets the next (domain.tokens.JoinedWindow). Rows
# stored before have NULL, and their texts are looked at when a window reaches them.
OPEN_END = tuple(
    f"ALTER TABLE {table} ADD COLUMN open_end INTEGER"
    for table in ("ledger_messages", "ledger_ended_messages")
)


def _open_end(c: Any) -> None:
    """Migration 10 (once: migration 1 of a store made before numbering runs it again)."""
    for table, statement in zip(("ledger_messages", "ledger_ended_messages"), OPEN_END,
                                strict=True):  # fmt: skip
        if "open_end" not in _columns(c, table):
            c.execute(statement)


MIGRATIONS = (
    _layout_at_numbering, _data_keys, _access_log, _audit_search, _caller_keys_index, _streams,
    _access_log_by_session, _sessions_by_creation, _type_index_partial, _open_end,
)  # fmt: skip
LATEST = len(MIGRATIONS)


def migrate(c: Any) -> None:
    """Apply, in one transaction (the cursor's), the migrations not applied yet."""
    c.execute(SCHEMA_TABLE)
    current = schema_version(c)
    if current >= LATEST:
        return
    for number, step in enumerate(MIGRATIONS, start=1):
        if number > current:
            step(c)
    c.execute("DELETE FROM ledger_schema")
    c.execute("INSERT INTO ledger_schema (version) VALUES (?)", (LATEST,))


def schema_version(c: Any) -> int:
    """The number of the last migration applied (0: none, or no ledger tables)."""
    c.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'ledger_schema'")
    if c.fetchone() is None:
        return 0
    c.execute("SELECT max(version) FROM ledger_schema")
    row = c.fetchone()
    return int(row[0] or 0)


def _columns(c: Any, table: str) -> set[str]:
    c.execute(f"PRAGMA table_info({table})")
    return {row[1] for row in c.fetchall()}
