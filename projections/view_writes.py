"""The inline projection's writes: one write's row changes applied in SQL, in the
transaction that stores its events, with the timeline's hash chain and token totals."""

from __future__ import annotations

import functools
import itertools
import operator
import uuid
from collections.abc import Callable, Iterable, Sequence
from datetime import datetime
from typing import Any

from eventsourcing.persistence import StoredEvent

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.integrity import GENESIS, chain_hashes
from session_ledger.domain.messages import canonical_json
from session_ledger.domain.ports import ACTIVE, ARCHIVED

from .bodies import stored_body
from .changes import (
    ArchiveOldest,
    CloseHistory,
    CloseMessage,
    EraseContent,
    ExtendStream,
    InsertMessages,
    OpenStream,
    SealContent,
    TimelineRow,
    ViewChanges,
)
from .dialect import Dialect, ViewRows
from .encrypt_existing import ClearSessionSealing
from .key_rows import CONTENT_TABLES, SessionContent
from .sql import (
    ADDED_TOKENS,
    CHAIN_AT,
    ENDED_TOKENS,
    HEAD_AT,
    LIVE,
    LIVE_COLUMNS,
    SESSION_INSERT,
    TIMELINE_COLUMNS,
)
from .streams_view import OPEN, STREAM_COLUMNS
from .write_heads import WriteHeads


def _records(stored: Iterable[StoredEvent]) -> list[tuple[int, str, bytes]]:
    return [(s.originator_version, s.topic, s.state) for s in stored]


def _inserts_only(changes: Iterable[object]) -> bool:
    """Whether every change inserts messages (a loop: no generator made per write)."""
    for change in changes:  # noqa: SIM110 (all() of a generator: the generator per write)
        if type(change) is not InsertMessages:
            return False
    return True


class EventsDisagree(LedgerError):
    """The event log says two different things about one message (a store written before
    replaces compared messages by their bytes): the views cannot follow both."""

    code = "events_disagree"


# Where a timeline row's reason, idempotency key and request digest stand among its values.
_TIMELINE_NAMES = [name.strip() for name in TIMELINE_COLUMNS.split(",")]
_AUDIT_POSITIONS = tuple(
    _TIMELINE_NAMES.index(name) for name in ("reason", "idempotency_key", "request_digest")
)


def _picker(positions: list[int]) -> Callable[[tuple[Any, ...]], tuple[Any, ...]]:
    """What takes the values at `positions` (two or more) from a tuple, as a tuple."""
    pick: Callable[[tuple[Any, ...]], tuple[Any, ...]] = operator.itemgetter(*positions)
    return pick


class ViewWriter:
    """Writes the view rows of a write (and of `rebuild`, event by event), through one
    dialect; bodies come sealed (`SessionContent.sealed_changes`), and a session stored
    clear is sealed by `sealing`."""

    def __init__(
        self, dialect: Dialect, rows: ViewRows, content: SessionContent,
        sealing: ClearSessionSealing,
    ) -> None:  # fmt: skip
        self.dialect = dialect
        self.rows = rows
        self.content = content
        # The dialect's statements, bound once: a write runs them a few times each.
        self._execute = dialect.execute
        self._insert_rows = dialect.insert_rows
        self._sid = dialect.sid
        self._time = dialect.time
        self._seal_session = sealing.seal_session
        # The row each session's last write left, so that the next append need not read it.
        self.heads = WriteHeads()

    # -- inline writes ----------------------------------------------------------------------

    def apply_changes(
        self,
        cursor: Any,
        vc: ViewChanges,
        records: Sequence[StoredEvent],
        chain_before: bytes | None = None,
        *,
        check_kept: bool = False,
        ahead: list[bytes | None] | None = None,
    ) -> bytes | None:
        """Write one write's view rows, with the cursor that stores its events (`records`,
        which the timeline's hash chain covers). `chain_before` is h_{v-1} when the caller
        knows it (else it is read); returns the last record's hash (None: unchained).
        `check_kept` (views derived from the log): a replace's kept messages must be the
        rows it keeps, byte for byte, else `EventsDisagree`. `ahead`: the chain from
        h_{v-1} that `chains_ahead` made before the transaction, used if that h_{v-1} is
        the one found in it.

        The chain hash and token total of the row before come from `heads` where a write
        of this process noted them (write_heads.py), else from one read of that row."""
        sid = self._sid(vc.session_id)
        run = self._execute
        times = self.times(vc)
        if vc.started:
            run(cursor, SESSION_INSERT, self.session_params(vc, times))
        for c in vc.changes:
            if isinstance(c, InsertMessages):
                self._insert_rows(cursor, sid, c.version, c.status, c.rows)
            elif isinstance(c, CloseHistory):
                if check_kept and c.kept:
                    self._check_kept(cursor, sid, vc.session_id, c)
                self._close_history(cursor, sid, c)
            elif isinstance(c, CloseMessage):
                self._end_rows(cursor, c.version, f"{LIVE} AND message_id = ?",
                               (sid, ACTIVE, c.message_id))  # fmt: skip
            elif isinstance(c, ArchiveOldest):
                self._archive_oldest(cursor, sid, c)
            elif isinstance(c, EraseContent):
                self._erase_content(cursor, vc.session_id)
            elif isinstance(c, SealContent):
                if not check_kept:  # (derived from the log: its records were sealed as written)
                    self._seal_session(cursor, vc.session_id, c.version)
            elif isinstance(c, OpenStream):
                self._open_stream(cursor, sid, c)
            elif isinstance(c, ExtendStream):
                self._extend_stream(cursor, sid, c)
            else:
                raise TypeError(f"no row writer for {type(c).__name__}")
        heads = self.heads
        noting = not check_kept and heads.usable(cursor)
        total_before: int | None = None
        if noting and not vc.started:
            previous = records[0].originator_version - 1
            known = heads.before(vc.session_id, previous)
            if known is None:
                run(cursor, HEAD_AT, (sid, previous))
                row = cursor.fetchone()
                known = None if row is None else (row[0] and bytes(row[0]), row[1])
            if known is not None:
                chain_before = chain_before or known[0]
                total_before = known[1]
        chains = self._chains(cursor, vc.session_id, records, chain_before, ahead)
        rows = zip(
            self.timeline_params(vc, times, sid),
            chains,
            vc.timeline,
            self.token_totals(vc, sid, total_before),
            strict=True,
        )
        for row, chain, t, (tokens, token_params) in rows:
            # The hash as a bytearray: sqlite3 binds one as it is, where a bytes value goes
            # through its adapter look-up first (two attribute look-ups that fail: ~2.4k
            # instructions); psycopg writes either as bytea. The stored bytes are the same.
            value = chain if chain is None else bytearray(chain)
            # So does None: the statement says NULL for each audit value that is None (most
            # writes give no reason, and have no digest without an idempotency key).
            nulls = (t.reason is None, t.idempotency_key is None, t.request_digest is None)
            sql, bound = self._timeline_insert(tokens, nulls)
            run(cursor, sql, bound((*row, value, t.archived_count, *token_params)))
        total = self._total_after(vc, total_before)
        if noting and total is not None and _inserts_only(vc.changes):
            heads.note(vc.session_id, vc.timeline[-1].version, chains[-1], total)
        else:  # rebuilt, or a write that may change rows before it: read them next time
            heads.drop(vc.session_id)
        return chains[-1]

    @staticmethod
    def _total_after(vc: ViewChanges, total_before: int | None) -> int | None:
        """The token total of the write's last row, when known without reading the store."""
        total = 0 if vc.started else total_before
        for t in vc.timeline:
            if total is None or t.ends_rows:
                return None
            total += t.tokens_added
        return total

    @staticmethod
    @functools.cache
    def _timeline_insert(
        tokens: str, nulls: tuple[bool, bool, bool]
    ) -> tuple[str, Callable[[tuple[Any, ...]], tuple[Any, ...]]]:
        """The timeline INSERT whose token total is the SQL expression `tokens`, with NULL
        for the reason, idempotency key and request digest that `nulls` marks; and what
        picks its parameters from a row's values (`_timeline_values`, the chain, the
        archived count, the token total's parameters). One pair per shape: a write builds
        none."""
        skipped = {p for p, null in zip(_AUDIT_POSITIONS, nulls, strict=True) if null}
        marks = ", ".join("NULL" if p in skipped else "?" for p in range(12))
        picked = [p for p in range(12 + tokens.count("?")) if p not in skipped]
        sql = f"INSERT INTO ledger_timeline ({TIMELINE_COLUMNS}) VALUES ({marks}, {tokens})"
        return sql, _picker(picked)

    def token_totals(
        self, vc: ViewChanges, sid: Any, total_before: int | None = None
    ) -> list[tuple[str, tuple[Any, ...]]]:
        """Each timeline row's token total, as an SQL expression and its parameters. A
        write that starts its session knows them (nothing came before, and a new session
        has no rows to end), as does one given the total before it (`total_before`) up to
        a row that ends rows; any other adds to the total before it, less the tokens of
        the rows it ended (which its changes have closed by then)."""
        if vc.started:
            totals = itertools.accumulate(t.tokens_added for t in vc.timeline)
            return [("?", (total,)) for total in totals]
        out: list[tuple[str, tuple[Any, ...]]] = []
        for t in vc.timeline:
            if t.ends_rows:
                total_before = None
                out.append((self._less_ended, (sid, t.version - 1, t.tokens_added, sid, ACTIVE,
                                               t.version)))  # fmt: skip
            elif total_before is not None:
                total_before += t.tokens_added
                out.append(("?", (total_before,)))
            else:
                out.append((ADDED_TOKENS, self._added_tokens(sid, t)))
        return out

    @staticmethod
    def _added_tokens(sid: Any, t: TimelineRow) -> tuple[Any, ...]:
        """The parameters of ADDED_TOKENS: the total before `t`, plus what it added."""
        return (sid, t.version - 1, t.tokens_added)

    @functools.cached_property
    def _less_ended(self) -> str:
        return f"{ADDED_TOKENS} - {ENDED_TOKENS.format(ended=self.dialect.ended_rows)}"

    def chains_ahead(
        self, session_id: uuid.UUID, records: Sequence[StoredEvent]
    ) -> list[bytes | None] | None:
        """The chain from h_{v-1}: h_{v-1}, then h_v of each record, made before the write's
        transaction takes the store's write lock (SHA-256 of a 28 MiB write: 20-90 ms that
        every other writer of a SQLite file waited for), from the h_{v-1} known without
        the store: the genesis for a session's first write, else this process's note of
        the row before (write_heads.py, read here as a guess: `apply_changes` uses the
        hashes only if the h_{v-1} it finds in the transaction is the same). None when
        neither is known."""
        first = records[0].originator_version
        if first == 1:
            previous: bytes | None = GENESIS
        else:
            noted = self.heads.before(session_id, first - 1)
            previous = None if noted is None else noted[0]
        if previous is None:
            return None
        return [previous, *chain_hashes(session_id, _records(records), previous)]

    def _chains(
        self,
        cursor: Any,
        session_id: uuid.UUID,
        records: Sequence[StoredEvent],
        previous: bytes | None = None,
        ahead: list[bytes | None] | None = None,
    ) -> list[bytes | None]:
        """h_v of each record, from h_{v-1} (`previous`, or as stored; None when it is not
        stored: a store written before chains were kept, until `rebuild` fills them in);
        `ahead`'s when it starts from the same h_{v-1}."""
        first = records[0].originator_version
        if first == 1:
            previous = GENESIS
        elif previous is None:
            self._execute(cursor, CHAIN_AT, (self._sid(session_id), first - 1))
            row = cursor.fetchone()
            previous = bytes(row["value"]) if row is not None and row["value"] is not None else None
        if previous is None:
            return [None] * len(records)
        if ahead is not None and ahead[0] == previous:
            return ahead[1:]
        return list(chain_hashes(session_id, _records(records), previous))

    def times(self, vc: ViewChanges) -> dict[datetime, Any]:
        """Each distinct time of a write in the store's form (the session's creation time
        is its first event's)."""
        times: dict[datetime, Any] = {}
        for row in vc.timeline:
            moment = row.recorded_at
            if moment not in times:
                times[moment] = self._time(moment)
        return times

    def session_params(self, vc: ViewChanges, times: dict[datetime, Any]) -> tuple[Any, ...]:
        s = vc.session
        return (self._sid(vc.session_id), s.tenant, s.key, times[s.created_at])

    def timeline_params(
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

    def _check_kept(self, cursor: Any, sid: Any, session_id: uuid.UUID, c: CloseHistory) -> None:
        self._execute(cursor, "SELECT message FROM ledger_messages WHERE session_id = ? AND "
                      "status = ? ORDER BY message_id LIMIT ?", (sid, ACTIVE, c.kept))  # fmt: skip
        held = [r[1] for r in self.rows.opened(session_id, [(0, row["message"]) for row in
                                                                cursor.fetchall()])]  # fmt: skip
        for i, message in enumerate(c.kept_messages):
            expected = stored_body(message, canonical_json(message))
            if i >= len(held) or held[i] != expected:
                raise EventsDisagree(
                    f"session {session_id}: the replace of version {c.version} keeps message "
                    f"{i} as {expected[:200]}, but the history before it holds "
                    f"{held[i][:200] if i < len(held) else 'no such message'}"
                )

    def _archive_oldest(self, cursor: Any, sid: Any, c: ArchiveOldest) -> None:
        last = self._id_at(cursor, "SELECT max(message_id) AS id FROM (SELECT message_id "
                           f"FROM ledger_messages WHERE {LIVE} ORDER BY message_id LIMIT ?) "
                           "AS oldest", (sid, ACTIVE, c.messages))  # fmt: skip
        if last is None:
            return
        self._execute(
            cursor,
            f"INSERT INTO ledger_messages ({LIVE_COLUMNS}) SELECT session_id, ?, message_id, ?, "
            f"role, tokens, tokens_joined, message, open_end FROM ledger_messages WHERE {LIVE} "
            "AND message_id <= ?",
            (ARCHIVED, c.version, sid, ACTIVE, last),
        )
        self._end_rows(cursor, c.version, f"{LIVE} AND message_id <= ?", (sid, ACTIVE, last))

    def _id_at(self, cursor: Any, sql: str, params: Sequence[Any]) -> Any:
        self._execute(cursor, sql, params)
        row = cursor.fetchone()
        return None if row is None else row["id"]

    def _erase_content(self, cursor: Any, session_id: uuid.UUID) -> None:
        """Drop every row that held the session's content, its data key, and the token
        counts that were measured from it."""
        sid = self._sid(session_id)
        for table in (*CONTENT_TABLES, "ledger_data_keys"):
            self._execute(cursor, f"DELETE FROM {table} WHERE session_id = ?", (sid,))
        self._execute(cursor, "UPDATE ledger_timeline SET token_total = 0 WHERE session_id = ?",
                      (sid,))  # fmt: skip
        self.heads.drop(session_id)  # (its note holds a total zeroed here: read it again)
        self.content.forget(session_id)

    def _open_stream(self, cursor: Any, sid: Any, c: OpenStream) -> None:
        self._execute(
            cursor,
            f"INSERT INTO ledger_streams ({STREAM_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, '', ?,"
            " NULL, NULL)",
            (sid, c.stream_id, c.version, c.role, c.turn, c.parent, OPEN, self._time(c.at)),
        )

    def _extend_stream(self, cursor: Any, sid: Any, c: ExtendStream) -> None:
        ended = None if c.state == OPEN else c.version
        self._execute(
            cursor,
            "UPDATE ledger_streams SET text = text || ?, state = ?, updated_at = ?,"
            " ended_version = ?, cause = ? WHERE session_id = ? AND stream_id = ?",
            (c.text, c.state, self._time(c.at), ended, c.cause, sid, c.stream_id),
        )
