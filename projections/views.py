"""The session views in SQL, shared by the SQLite and PostgreSQL recorders.

Tables (all derived from events, rebuilt by `rebuild`):
- `ledger_messages`: the live transcript, one row per live message and status, keyed by
  (session, status, message id), live since version `valid_from`. It holds nothing else,
  so a window or a position reads only live rows, and an append writes one b-tree of it.
  Its `message` is the message's `stored_body`: for one text block and no
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

import functools
import heapq
import itertools
import operator
import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime
from typing import Any, Protocol

from eventsourcing.persistence import StoredEvent

from session_ledger.domain.integrity import GENESIS, chain_hashes
from session_ledger.domain.messages import ChatMessage, body_json, gc_paused
from session_ledger.domain.ports import ACTIVE, ARCHIVED, PriorWrite, SessionHead
from session_ledger.domain.tokens import NamedTokenizer, TailEntry, window_length

from .changes import (
    ArchiveOldest,
    CloseHistory,
    CloseMessage,
    InsertMessages,
    MessageRow,
    TimelineRow,
    ViewChanges,
)

TIME_FORMAT = "%Y-%m-%dT%H:%M:%S.%fZ"  # fixed width, so text order is time order
READ_ATTEMPTS = 3  # windows read while writers keep changing the session, then a snapshot
TAIL_BATCH = 64  # rows per tail read (with bodies); doubles as the window grows
MAX_TAIL_BATCH = 4096
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
NOT_CLEARED = (  # the session's last event (its head's) is not a reset
    " AND (SELECT t.event_type FROM ledger_timeline t WHERE t.session_id = s.session_id"
    " ORDER BY t.version DESC LIMIT 1) <> 'HistoryCleared'"
)
CHAIN_AT = "SELECT chain AS value FROM ledger_timeline WHERE session_id = ? AND version = ?"
LIVE = "session_id = ? AND status = ?"  # in ledger_messages every row is live
LIVE_COLUMNS = "session_id, status, message_id, valid_from, role, tokens, tokens_joined, message"
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
    """`value` in UTC as TIME_FORMAT text (four-digit years, so text order is time order)."""
    if value.tzinfo is not UTC:  # event times are UTC already: no conversion on a write
        value = value.astimezone(UTC)
    return value.isoformat(timespec="microseconds")[:-6] + "Z"  # less its "+00:00"


def _portable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, datetime):
        return utc_text(value)
    return value


def _records(stored: Iterable[StoredEvent]) -> Iterator[tuple[int, str, bytes]]:
    return ((s.originator_version, s.topic, s.state) for s in stored)


class Reader(Protocol):
    def __call__(self, sql: str, params: Sequence[Any]) -> list[Any]:
        """Rows whose columns are read by name."""
        ...

    def tuples(self, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        """Plain tuples: no row object per row, for reads of many rows or hot ones."""
        ...


class SQLViews(ABC):
    """Reads and inline writes of the views; subclasses supply the SQL dialect."""

    view_tables = ("ledger_sessions", "ledger_messages", "ledger_ended_messages", "ledger_timeline")
    view_order = {
        "ledger_sessions": "session_id",
        "ledger_messages": "session_id, status, message_id",
        "ledger_ended_messages": "session_id, status, message_id, valid_from",
        "ledger_timeline": "session_id, version",
    }
    event_position = "rowid"  # the column that orders the whole event log
    no_limit: Any = -1
    # Where rows that ended at a version are looked up (session_id, valid_to = ?).
    ended_rows = "ledger_ended_messages"
    rows_read = 0  # view rows this recorder fetched: the cost model the tests check

    # -- dialect ----------------------------------------------------------------------------

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Reader]:
        """A reader outside any transaction: each statement reads its own snapshot."""

    def _reading_past(self) -> AbstractContextManager[Reader]:
        """A reader for the rows of a past version (message id ranges, version filters)."""
        return self._reading()

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[Reader]:
        """A read-only transaction: every statement sees the same state (long reads)."""

    @abstractmethod
    def _execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None: ...

    @abstractmethod
    def _write_transaction(self) -> AbstractContextManager[Any]:
        """A write transaction that keeps other writers of events out until it ends."""

    @abstractmethod
    def _reader(self, cursor: Any) -> Reader: ...

    @abstractmethod
    def _stream(self, sql: str) -> AbstractContextManager[Iterator[Any]]:
        """Rows of a query, fetched as iterated (for whole-table reads)."""

    @abstractmethod
    def _insert_rows(
        self, cursor: Any, sid: Any, version: int, status: str, rows: Sequence[MessageRow]
    ) -> None: ...

    @abstractmethod
    def _sid(self, session_id: uuid.UUID) -> Any: ...

    @abstractmethod
    def _time(self, value: datetime) -> Any: ...

    @abstractmethod
    def _datetime(self, value: Any) -> datetime: ...

    # -- inline writes ----------------------------------------------------------------------

    def apply_changes(
        self,
        cursor: Any,
        vc: ViewChanges,
        records: Sequence[StoredEvent],
        chain_before: bytes | None = None,
    ) -> bytes | None:
        """Write one write's view rows, with the cursor that stores its events (`records`,
        which the timeline's hash chain covers). `chain_before` is h_{v-1} when the caller
        knows it (else it is read); returns the last record's hash (None: unchained)."""
        sid = self._sid(vc.session_id)
        run = self._execute
        times = self._times(vc)
        if vc.started:
            run(cursor, SESSION_INSERT, self._session_params(vc, times))
        for c in vc.changes:
            if isinstance(c, InsertMessages):
                self._insert_rows(cursor, sid, c.version, c.status, c.rows)
            elif isinstance(c, CloseHistory):
                self._close_history(cursor, sid, c)
            elif isinstance(c, CloseMessage):
                self._end_rows(cursor, c.version, f"{LIVE} AND message_id = ?",
                               (sid, ACTIVE, c.message_id))  # fmt: skip
            elif isinstance(c, ArchiveOldest):
                self._archive_oldest(cursor, sid, c)
        chains = self._chains(cursor, vc.session_id, records, chain_before)
        rows = zip(
            self._timeline_params(vc, times, sid),
            chains,
            vc.timeline,
            self._token_totals(vc, sid),
            strict=True,
        )
        for row, chain, t, (tokens, token_params) in rows:
            run(cursor, self._timeline_insert(tokens),
                (*row, chain, t.archived_count, *token_params))  # fmt: skip
        return chains[-1]

    @staticmethod
    @functools.cache
    def _timeline_insert(tokens: str) -> str:
        """The timeline INSERT whose token total is the SQL expression `tokens` (one
        string per expression: a write builds none)."""
        return f"INSERT INTO ledger_timeline ({TIMELINE_COLUMNS}) VALUES ({'?, ' * 12}{tokens})"

    def _token_totals(self, vc: ViewChanges, sid: Any) -> list[tuple[str, tuple[Any, ...]]]:
        """Each timeline row's token total, as an SQL expression and its parameters. A
        write that starts its session knows them (nothing came before, and a new session
        has no rows to end); any other adds to the total before it, less the tokens of
        the rows it ended (which its changes have closed by then)."""
        if vc.started:
            totals = itertools.accumulate(t.tokens_added for t in vc.timeline)
            return [("?", (total,)) for total in totals]
        out: list[tuple[str, tuple[Any, ...]]] = []
        for t in vc.timeline:
            if t.ends_rows:
                out.append((self._less_ended, (sid, t.version - 1, t.tokens_added, sid, ACTIVE,
                                               t.version)))  # fmt: skip
            else:
                out.append((ADDED_TOKENS, self._added_tokens(sid, t)))
        return out

    @staticmethod
    def _added_tokens(sid: Any, t: TimelineRow) -> tuple[Any, ...]:
        """The parameters of ADDED_TOKENS: the total before `t`, plus what it added."""
        return (sid, t.version - 1, t.tokens_added)

    @functools.cached_property
    def _less_ended(self) -> str:
        return f"{ADDED_TOKENS} - {ENDED_TOKENS.format(ended=self.ended_rows)}"

    def _chains(
        self,
        cursor: Any,
        session_id: uuid.UUID,
        records: Sequence[StoredEvent],
        previous: bytes | None = None,
    ) -> list[bytes | None]:
        """h_v of each record, from h_{v-1} (`previous`, or as stored; None when it is not
        stored: a store written before chains were kept, until `rebuild` fills them in)."""
        first = records[0].originator_version
        if first == 1:
            previous = GENESIS
        elif previous is None:
            self._execute(cursor, CHAIN_AT, (self._sid(session_id), first - 1))
            row = cursor.fetchone()
            previous = bytes(row["value"]) if row is not None and row["value"] is not None else None
        if previous is None:
            return [None] * len(records)
        return list(chain_hashes(session_id, _records(records), previous))

    def _times(self, vc: ViewChanges) -> dict[datetime, Any]:
        """Each distinct time of a write in the store's form (the session's creation time
        is its first event's)."""
        times: dict[datetime, Any] = {}
        for moment in (r.recorded_at for r in vc.timeline):
            if moment not in times:
                times[moment] = self._time(moment)
        return times

    def _session_params(self, vc: ViewChanges, times: dict[datetime, Any]) -> tuple[Any, ...]:
        s = vc.session
        return (self._sid(vc.session_id), s.tenant, s.key, times[s.created_at])

    def _timeline_params(
        self, vc: ViewChanges, times: dict[datetime, Any], sid: Any
    ) -> list[tuple[Any, ...]]:
        return [self._timeline_values(sid, t, times[t.recorded_at]) for t in vc.timeline]

    @staticmethod
    def _timeline_values(sid: Any, t: TimelineRow, recorded_at: Any) -> tuple[Any, ...]:
        """A timeline row's values up to its chain (then archived count and token total)."""
        return (
            sid, t.version, recorded_at, t.event_type, t.actor, t.reason, t.idempotency_key,
            t.request_digest, t.message_count, t.next_message_id,
        )  # fmt: skip

    # Closing and archiving first find where their range of live rows starts or ends
    # (one read of the live rows by position), then change that range by message id. With
    # the bound in a subquery, PostgreSQL planned a nested loop over the whole session
    # when its statistics were behind (1.4 s for archive_oldest on 10,000 messages).

    def _end_rows(self, cursor: Any, version: int, where: str, params: tuple[Any, ...]) -> None:
        """Move the live rows that meet `where` to the ended rows, ended at `version`."""
        self._execute(
            cursor,
            f"INSERT INTO ledger_ended_messages ({LIVE_COLUMNS}, valid_to) SELECT {LIVE_COLUMNS},"
            f" ? FROM ledger_messages WHERE {where}",
            (version, *params),
        )
        self._execute(cursor, f"DELETE FROM ledger_messages WHERE {where}", params)

    def _close_history(self, cursor: Any, sid: Any, c: CloseHistory) -> None:
        marks = ", ".join("?" for _ in c.statuses)
        live = f"session_id = ? AND status IN ({marks})"
        bound: tuple[Any, ...] = ()
        if c.kept:  # a replace keeps its unchanged prefix (one status: active)
            first = self._id_at(cursor, "SELECT message_id AS id FROM ledger_messages "
                                f"WHERE {live} ORDER BY message_id LIMIT 1 OFFSET ?",
                                (sid, *c.statuses, c.kept))  # fmt: skip
            if first is None:
                return  # nothing after the prefix
            bound = (first,)
        where = live + (" AND message_id >= ?" if bound else "")
        self._end_rows(cursor, c.version, where, (sid, *c.statuses, *bound))

    def _archive_oldest(self, cursor: Any, sid: Any, c: ArchiveOldest) -> None:
        last = self._id_at(cursor, "SELECT max(message_id) AS id FROM (SELECT message_id "
                           f"FROM ledger_messages WHERE {LIVE} ORDER BY message_id LIMIT ?) "
                           "AS oldest", (sid, ACTIVE, c.messages))  # fmt: skip
        if last is None:
            return
        self._execute(
            cursor,
            f"INSERT INTO ledger_messages ({LIVE_COLUMNS}) SELECT session_id, ?, message_id, ?, "
            f"role, tokens, tokens_joined, message FROM ledger_messages WHERE {LIVE} "
            "AND message_id <= ?",
            (ARCHIVED, c.version, sid, ACTIVE, last),
        )
        self._end_rows(cursor, c.version, f"{LIVE} AND message_id <= ?", (sid, ACTIVE, last))

    def _id_at(self, cursor: Any, sql: str, params: Sequence[Any]) -> Any:
        self._execute(cursor, sql, params)
        row = cursor.fetchone()
        return None if row is None else row["id"]

    # -- reads (SessionViews) ---------------------------------------------------------------

    def context_window_bodies(
        self,
        session_id: uuid.UUID,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
        version: int | None = None,
    ) -> list[tuple[str, str]]:
        sid = self._sid(session_id)
        if version is not None:  # a past version's rows never change: any read is consistent
            with self._reading_past() as read:
                window, _ = self._window(read, sid, version, token_limit, initial_token_count,
                                         tokenizer)  # fmt: skip
            return window
        # The live rows, in the key order of their own table (a plan no statistics can
        # spoil). Each statement also reads the session's version; versions only grow, so
        # equal versions at the first and the last statement mean no write came between,
        # without holding a transaction open. Otherwise read again.
        for _ in range(READ_ATTEMPTS):
            with self._reading() as read:
                window, consistent = self._window(
                    read, sid, None, token_limit, initial_token_count, tokenizer
                )
            if consistent:
                return window
        with self.snapshot() as read:
            window, _ = self._window(read, sid, None, token_limit, initial_token_count, tokenizer)
        return window

    def _window(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
    ) -> tuple[list[tuple[str, str]], bool]:
        """The window's messages as stored, (role, body), and whether every statement
        read the same version of the session."""
        # Bodies come with the tail: one statement for a window within the first batch.
        # Rows are tuples that start like a TailEntry: (role, alone, joined, message, id, seen).
        bound = ""
        bound_params: tuple[Any, ...] = ()
        if version is not None:  # ids from the next one on were written after `version`
            bound = (" AND message_id < (SELECT next_message_id FROM ledger_timeline "
                     "WHERE session_id = ? AND version = ?)")  # fmt: skip
            bound_params = (sid, version)
        first = self._tail_rows(read, sid, version, bound, bound_params, TAIL_BATCH)
        versions = {first[0][5]} if first else set()
        read_rows: list[tuple[Any, ...]] = []

        def tail() -> Iterator[Sequence[Any]]:
            for row in self._tail(read, sid, version, first, versions):
                read_rows.append(row)
                if tokenizer is None:
                    yield row
                else:
                    content = ChatMessage.from_body(row[0], row[3]).content
                    yield TailEntry(row[0], *tokenizer.count(content))

        k = window_length(tail(), token_limit, initial_token_count)
        return [(r[0], r[3]) for r in reversed(read_rows[:k])], len(versions) <= 1

    def _tail_rows(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        where: str,
        params: tuple[Any, ...],
        limit: int,
    ) -> list[tuple[Any, ...]]:
        """Up to `limit` active rows newest first, that meet `where`, as tuples (role,
        alone, joined, message, id, seen): `seen` is the session's version as read (a past
        version's rows never change: there it is NULL)."""
        columns = "role, tokens, tokens_joined, message, message_id"
        select: tuple[str, tuple[Any, ...]]
        if version is None:
            select = (f"{columns}, {HEAD_VERSION} AS seen", (sid,))
        else:
            select = (f"{columns}, NULL AS seen", ())
        return self._rows(read, select, 4, sid, ACTIVE, version, where, params,
                          newest_first=True, limit=limit)  # fmt: skip

    def _rows(
        self,
        read: Reader,
        select: tuple[str, tuple[Any, ...]],
        id_index: int,
        sid: Any,
        status: str,
        version: int | None,
        where: str = "",
        params: tuple[Any, ...] = (),
        *,
        newest_first: bool = False,
        limit: int | None = None,
        offset: int = 0,
    ) -> list[tuple[Any, ...]]:
        """Rows of `status` live now (version None) or at `version` that meet `where` (an
        `AND ...` with `params`), in message id order, as tuples of `select` (its columns,
        with the message id at `id_index` for a past version, and their parameters).

        A past version's rows are those live since it or before, and those that ended
        after it: each table is read in its key order and the two are merged here (a
        UNION ALL of them was sorted whole by PostgreSQL). The live rows are read first,
        so a row that a write moves to the ended rows meanwhile is read twice, not missed;
        it is kept once."""
        columns, column_params = select
        order = "DESC" if newest_first else "ASC"
        if version is None:
            return self._tuples(
                read,
                f"SELECT {columns} FROM ledger_messages WHERE {LIVE}{where} "
                f"ORDER BY message_id {order} LIMIT ? OFFSET ?",
                (*column_params, sid, status, *params, self._limit(limit), offset),
            )
        wanted = self._limit(None if limit is None else offset + limit)
        arms = (("ledger_messages", LIVE_AT, (version,)),
                ("ledger_ended_messages", ENDED_AT, (version, version)))  # fmt: skip
        found = [
            self._tuples(
                read,
                f"SELECT {columns} FROM {table} WHERE {at}{where} "
                f"ORDER BY message_id {order} LIMIT ?",
                (*column_params, sid, status, *at_params, *params, wanted),
            )
            for table, at, at_params in arms
        ]
        key = operator.itemgetter(id_index)
        rows: list[tuple[Any, ...]] = []
        for row in heapq.merge(*found, key=key, reverse=newest_first):
            if not rows or key(rows[-1]) != key(row):
                rows.append(row)
        return rows[offset:] if limit is None else rows[offset : offset + limit]

    def _limit(self, limit: int | None) -> Any:
        return self.no_limit if limit is None else limit

    def _tail(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        first: list[tuple[Any, ...]],
        versions: set[Any],
    ) -> Iterator[tuple[Any, ...]]:
        """The messages newest first: the first batch, then growing batches read as they
        are consumed (each notes the session version it saw in `versions`)."""
        rows, batch = first, TAIL_BATCH
        while True:
            yield from rows
            if len(rows) < batch:
                return
            before, batch = rows[-1][4], min(batch * 2, MAX_TAIL_BATCH)
            rows = self._tail_rows(read, sid, version, " AND message_id < ?", (before,), batch)
            if not rows:  # an empty batch says no version: ask for it
                rows = self._tuples(read, HEAD_VERSION_SELECT, (sid,))
                versions.update(r[0] for r in rows)
                return
            versions.add(rows[0][5])

    def history_bodies(
        self,
        session_id: uuid.UUID,
        status: str,
        offset: int,
        limit: int | None,
        version: int | None = None,
    ) -> list[tuple[Any, ...]]:
        # (The id orders the merge of a past version's two tables; now only role and body.)
        select = ("role, message", ()) if version is None else ("role, message, message_id", ())
        with self._reading() as read, gc_paused():  # one row object per message
            return self._rows(read, select, 2, self._sid(session_id), status, version,
                              limit=limit, offset=offset)  # fmt: skip

    def version_at(self, session_id: uuid.UUID, when: datetime) -> int | None:
        """The session's version at time `when`: its last event at or before then.

        Event times never run backwards within a session, so the timeline is in time order
        by version and one statement binary-searches it through its primary key: log2(n)
        rows, and no index on time to keep up on every write."""
        sid = self._sid(session_id)
        with self._reading() as read:
            rows = self._fetch(read, VERSION_AT, (sid, self._time(when), self._time(when), sid))
        return (rows[0]["version"] or None) if rows else None

    def ended_at(self, session_id: uuid.UUID, version: int) -> list[tuple[str, ChatMessage]]:
        """The messages (with their status) that left the history at `version`."""
        with self._reading() as read:
            rows = self._fetch(
                read,
                f"SELECT status, role, message FROM {self.ended_rows} WHERE session_id = ? "
                "AND valid_to = ? ORDER BY status, message_id",
                (self._sid(session_id), version),
            )
        return [(r["status"], ChatMessage.from_body(r["role"], r["message"])) for r in rows]

    def message_at(
        self, session_id: uuid.UUID, position: int, count: int
    ) -> tuple[int, ChatMessage] | None:
        # Counted from the nearer end: removing the last message reads one row, not all.
        # (A position past `count` is looked for from the start: a writer elsewhere may
        # have added it since `count`, and this write then fails on its version.)
        from_end = count // 2 <= position < count
        with self._reading() as read:
            rows = self._fetch(
                read,
                f"SELECT message_id, role, message FROM ledger_messages WHERE {LIVE} "
                f"ORDER BY message_id {'DESC' if from_end else 'ASC'} LIMIT 1 OFFSET ?",
                (self._sid(session_id), ACTIVE, count - 1 - position if from_end else position),
            )
        if not rows:
            return None
        r = rows[0]
        return r["message_id"], ChatMessage.from_body(r["role"], r["message"])

    def session_head(self, session_id: uuid.UUID, version: int | None = None) -> SessionHead | None:
        # At a past version: that version's timeline row, which holds its counts too.
        bound, params = ("", ()) if version is None else (" AND t.version <= ?", (version,))
        with self._reading() as read:
            rows = self._fetch(
                read,
                "SELECT s.tenant, s.session_key, s.created_at, t.version, t.message_count, "
                "t.archived_count, t.token_total, t.recorded_at, t.event_type "
                "FROM ledger_sessions s JOIN ledger_timeline t ON t.session_id = s.session_id "
                f"WHERE s.session_id = ?{bound} ORDER BY t.version DESC LIMIT 1",
                (self._sid(session_id), *params),
            )
        if not rows:
            return None
        r = rows[0]
        return SessionHead(
            r["tenant"], r["session_key"], r["version"], r["message_count"], r["archived_count"],
            r["token_total"], self._datetime(r["created_at"]), self._datetime(r["recorded_at"]),
            r["event_type"],
        )  # fmt: skip

    def session_keys(
        self, tenant: str, prefix: str, after: str | None, limit: int, exclude_cleared: bool = False
    ) -> list[str]:
        cleared = NOT_CLEARED if exclude_cleared else ""
        with self._reading() as read:
            rows = self._fetch(
                read,
                "SELECT session_key FROM ledger_sessions s WHERE tenant = ? AND session_key > ? "
                "AND session_key >= ? AND session_key < ? AND substr(session_key, 1, ?) = ?"
                f"{cleared} ORDER BY session_key LIMIT ?",
                (tenant, after or "", prefix, prefix + MAX_CHAR, len(prefix), prefix, limit),
            )
        return [r["session_key"] for r in rows]

    def prior_write(self, session_id: uuid.UUID, idempotency_key: str) -> PriorWrite | None:
        with self._reading() as read:
            rows = self._fetch(
                read,
                "SELECT request_digest, version, message_count FROM ledger_timeline "
                "WHERE session_id = ? AND idempotency_key = ?",
                (self._sid(session_id), idempotency_key),
            )
        if not rows:
            return None
        return PriorWrite(rows[0]["request_digest"], rows[0]["version"], rows[0]["message_count"])

    def stored_chain(
        self, session_id: uuid.UUID, after_version: int, limit: int
    ) -> list[tuple[int, bytes | None]]:
        with self._reading() as read:
            rows = self._fetch(
                read,
                "SELECT version, chain FROM ledger_timeline WHERE session_id = ? AND version > ? "
                "ORDER BY version LIMIT ?",
                (self._sid(session_id), after_version, limit),
            )
        return [(r["version"], None if r["chain"] is None else bytes(r["chain"])) for r in rows]

    def all_sessions(self, after: tuple[str, str] | None, limit: int) -> list[tuple[str, str]]:
        tenant, key = after or ("", "")
        with self._reading() as read:
            rows = self._fetch(
                read,
                "SELECT tenant, session_key FROM ledger_sessions WHERE tenant > ? "
                "OR (tenant = ? AND session_key > ?) ORDER BY tenant, session_key LIMIT ?",
                (tenant, tenant, key, limit),
            )
        return [(r["tenant"], r["session_key"]) for r in rows]

    # -- rebuild ----------------------------------------------------------------------------

    @contextmanager
    def rebuilding(self) -> Iterator[tuple[Any, Reader]]:
        """Empty views in a transaction that holds writers off; readers keep the old ones
        until it commits."""
        with self._write_transaction() as cursor:
            for table in self.view_tables:
                self._execute(cursor, f"DELETE FROM {table}", ())
            yield cursor, self._reader(cursor)

    def stored_events(self, read: Reader, page: int = 1000) -> Iterator[StoredEvent]:
        """Every stored event in log order, read a page at a time through `read`."""
        position, after = self.event_position, 0
        while True:
            rows = read(
                f"SELECT {position} AS position, originator_id, originator_version, topic, "
                f"state FROM ledger_events WHERE {position} > ? ORDER BY {position} LIMIT ?",
                (after, page),
            )
            for r in rows:
                yield StoredEvent(
                    originator_id=uuid.UUID(str(r["originator_id"])),
                    originator_version=r["originator_version"],
                    topic=r["topic"],
                    state=bytes(r["state"]),
                )
            if len(rows) < page:
                return
            after = rows[-1]["position"]

    def dump(self, table: str) -> Iterator[tuple[Any, ...]]:
        """A view table's rows in key order, in a form equal across backends (and a
        message body as its canonical JSON, whichever form a store keeps it in)."""
        with self._stream(f"SELECT * FROM {table} ORDER BY {self.view_order[table]}") as rows:
            for row in rows:
                # sqlite3.Row iterates its values, psycopg's dict rows their keys
                values = {k: _portable(row[k]) for k in row.keys()}  # noqa: SIM118
                if "message" in values:
                    values["message"] = body_json(values["role"], values["message"])
                yield tuple(values.values())

    def _tuples(self, read: Reader, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        rows = read.tuples(sql, params)
        self.rows_read += len(rows)
        return rows

    def _fetch(self, read: Reader, sql: str, params: Sequence[Any]) -> list[Any]:
        rows = read(sql, params)
        self.rows_read += len(rows)
        return rows
