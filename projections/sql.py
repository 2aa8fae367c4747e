"""The SQL the SQLite and PostgreSQL views share: statements, and the reader protocol.

Tables (all derived from events, rebuilt by `rebuild`):
- `ledger_messages`: the live transcript, one row per live message and status, keyed by
  (session, status, message id), live since version `valid_from`. It holds nothing else,
  so a window or a position reads only live rows, and an append writes one b-tree of it.
  Its `message` is the message body (`bodies.py`): for one text block and no
  additional_kwargs (most messages) the JSON string of the text alone (`"..."`), else the
  canonical JSON (`{...}`). Stores made before this hold only the latter; both read alike.
- `ledger_ended_messages`: the rows that left it (removed, replaced, archived, cleared),
  each with the version `valid_to` that ended it. With the live rows they give any past
  version's transcript: the rows with valid_from <= v < valid_to, or still live.
- `ledger_sessions`: one row per session, written when it starts: tenant, key, created.
- `ledger_timeline`: one row per event: version, time, type, actor, reason, idempotency,
  hash chain, and the head the event left (counts, token total). A session's newest row
  is its head, so a write appends rows and updates none of the head's.
Statements are written with `?` placeholders; a dialect converts them.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any, Protocol

import orjson

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so text order is time order
READ_ATTEMPTS = 3  # windows read while writers keep changing the session, then a snapshot
TAIL_BATCH = 64  # rows per tail read (with bodies); doubles as the window grows
MAX_TAIL_BATCH = 4096
# The most bytes of bodies a batch of the tail, or a page of the history, reads with its
# rows: bodies over their share are left out (NULL) and read once the answer is known to
# hold them, so a read holds about as much as its answer, however long the session.
TAIL_BODY_BYTES = 4 * 1024 * 1024  # a batch of 64: bodies up to 64 KiB come with it
PAGE_INLINE_BYTES = 8192  # a page of 1,000 rows: 8 MiB
BODIES_BATCH = 500  # message ids per read of the bodies left out
MAX_CHAR = "\U0010ffff"

SESSION_INSERT = (
    "INSERT INTO ledger_sessions (session_id, tenant, session_key, created_at) VALUES (?, ?, ?, ?)"
)
TIMELINE_COLUMNS = (
    "session_id, version, recorded_at, event_type, actor, reason, idempotency_key, "
    "request_digest, message_count, next_message_id, chain, archived_count, token_total"
)
# The session's head is its newest timeline row: its version, counts and token total.
HEAD_VERSION_SELECT = (
    "SELECT h.version FROM ledger_timeline h WHERE h.session_id = ? ORDER BY h.version DESC LIMIT 1"
)
HEAD_VERSION = f"({HEAD_VERSION_SELECT})"
# The head's version with its counts of active and archived messages, in one statement.
HEAD_COUNTS_SELECT = (
    "SELECT h.version, h.message_count, h.archived_count FROM ledger_timeline h"
    " WHERE h.session_id = ? ORDER BY h.version DESC LIMIT 1"
)
# An event's token total: the one before it, plus what it added (then, where the event
# ends rows, minus theirs: `ENDED_TOKENS`).
PREVIOUS_TOKENS = (
    "(SELECT p.token_total FROM ledger_timeline p WHERE p.session_id = ? AND p.version = ?)"
)
ADDED_TOKENS = f"{PREVIOUS_TOKENS} + ?"
ENDED_TOKENS = (
    "(SELECT COALESCE(SUM(tokens), 0) FROM {ended} WHERE session_id = ? AND status = ?"
    " AND valid_to = ?)"
)
NOT_CLEARED = (  # the session's last change (encrypt-existing's is none) is not a reset
    " AND (SELECT t.event_type FROM ledger_timeline t WHERE t.session_id = s.session_id"
    " AND t.event_type <> 'SessionEncrypted'"
    " ORDER BY t.version DESC LIMIT 1) NOT IN ('HistoryCleared', 'SessionErased')"
)
# The event types of the frequent writes (a put, a stream's chunk): the audit search's
# type index leaves them out, so that such a write adds no entry to it. A search names
# INDEXED_TYPE's terms as they are written here so that SQLite sees the index applies.
UNINDEXED_TYPES = ("MessagesAppended", "StreamChunksAppended")
INDEXED_TYPE = " AND ".join(f"event_type <> '{name}'" for name in UNINDEXED_TYPES)
CHAIN_AT = "SELECT chain AS value FROM ledger_timeline WHERE session_id = ? AND version = ?"
HEAD_AT = "SELECT chain, token_total FROM ledger_timeline WHERE session_id = ? AND version = ?"
LIVE = "session_id = ? AND status = ?"  # in ledger_messages every row is live
# The message rows' columns when migrations were first numbered (migration 1 moves rows
# of that layout), and now: `open_end`, the message is empty or ends in whitespace
# (`domain.tokens.JoinedWindow`).
COLUMNS_AT_NUMBERING = (
    "session_id, status, message_id, valid_from, role, tokens, tokens_joined, message"
)
LIVE_COLUMNS = f"{COLUMNS_AT_NUMBERING}, open_end"
# A version's rows: those live since it or before, and those that ended after it.
LIVE_AT = f"{LIVE} AND valid_from <= ?"
ENDED_AT = f"{LIVE} AND valid_from <= ? AND valid_to > ?"
# Binary search for the last version recorded at or before a time: (lo, hi) brackets it,
# lo = 0 means "before the first event". No rows when the session does not exist.
VERSION_AT = (
    "WITH RECURSIVE search(lo, hi) AS ("
    f" SELECT CAST(0 AS BIGINT), {HEAD_VERSION}"
    " UNION ALL SELECT"
    " CASE WHEN t.recorded_at <= ? THEN (lo + hi + 1) / 2 ELSE lo END,"
    " CASE WHEN t.recorded_at <= ? THEN hi ELSE (lo + hi + 1) / 2 - 1 END"
    " FROM search JOIN ledger_timeline t ON t.session_id = ? AND t.version = (lo + hi + 1) / 2"
    " WHERE lo < hi)"
    " SELECT lo AS version FROM search WHERE lo >= hi"
)


def utc_text(value: datetime) -> str:
    """`value` in UTC as TIME_FORMAT text (four-digit years, so text order is time order).

    orjson writes it: its text of a UTC datetime is `isoformat`'s with "Z" for "+00:00"
    (`tests/unit/test_utc_text.py`), at a fifth of the instructions of isoformat's
    formatting (about 3k, not 15k, callgrind: one a write), save that it leaves out a
    zero microsecond, as isoformat does. It takes only the datetime class itself."""
    if value.tzinfo is not UTC or type(value) is not datetime:
        # (event times are UTC datetimes already: no conversion on a write)
        u = value.astimezone(UTC)
        value = datetime(u.year, u.month, u.day, u.hour, u.minute, u.second, u.microsecond, UTC)
    text = orjson.dumps(value, option=orjson.OPT_UTC_Z)
    return text[1:-1].decode() if value.microsecond else text[1:-2].decode() + ".000000Z"


def prefix_upper_bound(prefix: str) -> str | None:
    """The least text above every text that starts with `prefix` (code point order), or
    None when nothing is: `prefix + MAX_CHAR` would leave out keys that go on with it."""
    kept = prefix.rstrip(MAX_CHAR)
    if not kept:
        return None
    following = ord(kept[-1]) + 1
    if 0xD800 <= following <= 0xDFFF:  # surrogates are no characters of stored text
        following = 0xE000
    return kept[:-1] + chr(following)


class Reader(Protocol):
    def __call__(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Rows whose columns are read by name."""
        ...

    def tuples(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Plain tuples: no row object per row, for reads of many rows or hot ones."""
        ...
