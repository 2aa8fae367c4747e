"""The session views in SQL, shared by the SQLite and PostgreSQL recorders.

Tables (all derived from events, rebuilt by `rebuild`):
- `ledger_messages`: the temporal transcript. One row per message per status, live
  from version `valid_from` until `valid_to` (NULL while live). A covering partial index
  over the live rows is the context-window source: role and token counts of the tail.
- `ledger_sessions`: one row per session: tenant, key, version, counts, token total.
- `ledger_timeline`: one row per event: version, time, type, actor, reason, idempotency.
Statements are written with `?` placeholders; a dialect converts them.
"""

from __future__ import annotations

import uuid
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.ports import ACTIVE, ARCHIVED, PriorWrite, SessionHead
from session_ledger.domain.tokens import NamedTokenizer, TailEntry, window_length

from .changes import (
    ArchiveOldest,
    CloseHistory,
    CloseMessage,
    InsertMessages,
    MessageRow,
    ViewChanges,
)

TAIL_BATCH = 32  # rows per tail read; doubles while the window keeps growing
MAX_TAIL_BATCH = 1024
MAX_CHAR = "\U0010ffff"

LIVE = "session_id = ? AND status = ? AND valid_to IS NULL"


class Reader(Protocol):
    def __call__(self, sql: str, params: Sequence[Any]) -> list[Any]: ...


class SQLViews(ABC):
    """Reads and inline writes of the views; subclasses supply the SQL dialect."""

    no_limit: Any = -1
    rows_read = 0  # view rows this recorder fetched: the cost model the tests check

    # -- dialect ----------------------------------------------------------------------------

    @abstractmethod
    def _reading(self) -> AbstractContextManager[Reader]:
        """A read-only snapshot: every query through the reader sees the same version."""

    @abstractmethod
    def _execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None: ...

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

    def apply_changes(self, cursor: Any, vc: ViewChanges) -> None:
        """Write one write's view rows, with the cursor that stores its events."""
        sid, s = self._sid(vc.session_id), vc.session
        run = self._execute
        run(
            cursor,
            "INSERT INTO ledger_sessions (session_id, tenant, session_key, version, "
            "message_count, archived_count, token_total, created_at, updated_at) "
            "VALUES (?, ?, ?, ?, ?, ?, 0, ?, ?) ON CONFLICT (session_id) DO UPDATE SET "
            "version = excluded.version, message_count = excluded.message_count, "
            "archived_count = excluded.archived_count, updated_at = excluded.updated_at",
            (sid, s.tenant, s.key, s.version, s.message_count, s.archived_count,
             self._time(s.updated_at), self._time(s.updated_at)),
        )  # fmt: skip
        for c in vc.changes:
            if isinstance(c, InsertMessages):
                self._insert_rows(cursor, sid, c.version, c.status, c.rows)
                if c.status == ACTIVE:
                    self._add_tokens(cursor, sid, sum(r.tokens for r in c.rows))
            elif isinstance(c, CloseHistory):
                marks = ", ".join("?" for _ in c.statuses)
                run(
                    cursor,
                    "UPDATE ledger_messages SET valid_to = ? WHERE session_id = ? "
                    f"AND valid_to IS NULL AND status IN ({marks})",
                    (c.version, sid, *c.statuses),
                )
                run(
                    cursor,
                    "UPDATE ledger_sessions SET token_total = 0 WHERE session_id = ?",
                    (sid,),
                )
            elif isinstance(c, CloseMessage):
                run(
                    cursor,
                    f"UPDATE ledger_messages SET valid_to = ? WHERE {LIVE} AND message_id = ?",
                    (c.version, sid, ACTIVE, c.message_id),
                )
                self._add_tokens(cursor, sid, -c.tokens)
            elif isinstance(c, ArchiveOldest):
                self._archive_oldest(cursor, sid, c)
        for t in vc.timeline:
            run(
                cursor,
                "INSERT INTO ledger_timeline (session_id, version, recorded_at, event_type, "
                "actor, reason, idempotency_key, request_digest, message_count) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (sid, t.version, self._time(t.recorded_at), t.event_type, t.actor, t.reason,
                 t.idempotency_key, t.request_digest, t.message_count),
            )  # fmt: skip

    def _add_tokens(self, cursor: Any, sid: Any, delta: int) -> None:
        self._execute(
            cursor,
            "UPDATE ledger_sessions SET token_total = token_total + ? WHERE session_id = ?",
            (delta, sid),
        )

    def _archive_oldest(self, cursor: Any, sid: Any, c: ArchiveOldest) -> None:
        archived = "session_id = ? AND status = ? AND valid_from = ?"
        self._execute(
            cursor,
            "INSERT INTO ledger_messages (session_id, message_id, valid_from, valid_to, status, "
            "role, tokens, tokens_joined, message) SELECT session_id, message_id, ?, NULL, ?, "
            f"role, tokens, tokens_joined, message FROM ledger_messages WHERE {LIVE} "
            "ORDER BY message_id LIMIT ?",
            (c.version, ARCHIVED, sid, ACTIVE, c.count),
        )
        self._execute(
            cursor,
            f"UPDATE ledger_messages SET valid_to = ? WHERE {LIVE} AND message_id IN "
            f"(SELECT message_id FROM ledger_messages WHERE {archived})",
            (c.version, sid, ACTIVE, sid, ARCHIVED, c.version),
        )
        self._execute(
            cursor,
            "UPDATE ledger_sessions SET token_total = token_total - "
            "(SELECT COALESCE(SUM(tokens), 0) "
            f"FROM ledger_messages WHERE {archived}) WHERE session_id = ?",
            (sid, ARCHIVED, c.version, sid),
        )

    # -- reads (SessionViews) ---------------------------------------------------------------

    def context_window(
        self,
        session_id: uuid.UUID,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
    ) -> list[ChatMessage]:
        sid = self._sid(session_id)
        with self._reading() as read:
            rows = self._fetch(
                read, "SELECT message_count FROM ledger_sessions WHERE session_id = ?", (sid,)
            )
            total = rows[0]["message_count"] if rows else 0
            if total == 0:
                return []
            seen: list[Any] = []

            def tail() -> Iterator[TailEntry]:
                for row in self._tail(read, sid, with_body=tokenizer is not None):
                    seen.append(row)
                    if tokenizer is None:
                        yield TailEntry(row["role"], row["tokens"], row["tokens_joined"])
                    else:
                        content = ChatMessage.from_json(row["message"]).content
                        yield TailEntry(row["role"], *tokenizer.count(content))

            k = window_length(tail(), total, token_limit, initial_token_count)
            if tokenizer is not None:
                return [ChatMessage.from_json(r["message"]) for r in reversed(seen[:k])]
            first_id = seen[k - 1]["message_id"]
            bodies = self._fetch(
                read,
                f"SELECT message FROM ledger_messages WHERE {LIVE} AND message_id >= ? "
                "ORDER BY message_id",
                (sid, ACTIVE, first_id),
            )
        return [ChatMessage.from_json(r["message"]) for r in bodies]

    def _tail(self, read: Reader, sid: Any, *, with_body: bool) -> Iterator[Any]:
        """The live active messages newest first, read in growing batches as consumed."""
        columns = "message_id, role, tokens, tokens_joined" + (", message" if with_body else "")
        before, batch = None, TAIL_BATCH
        while True:
            bound = "" if before is None else " AND message_id < ?"
            params = (sid, ACTIVE) + (() if before is None else (before,)) + (batch,)
            rows = self._fetch(
                read,
                f"SELECT {columns} FROM ledger_messages WHERE {LIVE}{bound} "
                "ORDER BY message_id DESC LIMIT ?",
                params,
            )
            yield from rows
            if len(rows) < batch:
                return
            before, batch = rows[-1]["message_id"], min(batch * 2, MAX_TAIL_BATCH)

    def history(
        self, session_id: uuid.UUID, status: str, offset: int, limit: int | None
    ) -> list[ChatMessage]:
        with self._reading() as read:
            rows = self._fetch(
                read,
                f"SELECT message FROM ledger_messages WHERE {LIVE} ORDER BY message_id "
                "LIMIT ? OFFSET ?",
                (self._sid(session_id), status, self.no_limit if limit is None else limit, offset),
            )
        return [ChatMessage.from_json(r["message"]) for r in rows]

    def message_at(
        self, session_id: uuid.UUID, position: int
    ) -> tuple[int, ChatMessage, int] | None:
        with self._reading() as read:
            rows = self._fetch(
                read,
                f"SELECT message_id, message, tokens FROM ledger_messages WHERE {LIVE} "
                "ORDER BY message_id LIMIT 1 OFFSET ?",
                (self._sid(session_id), ACTIVE, position),
            )
        if not rows:
            return None
        return rows[0]["message_id"], ChatMessage.from_json(rows[0]["message"]), rows[0]["tokens"]

    def session_head(self, session_id: uuid.UUID) -> SessionHead | None:
        with self._reading() as read:
            rows = self._fetch(
                read, "SELECT * FROM ledger_sessions WHERE session_id = ?", (self._sid(session_id),)
            )
        if not rows:
            return None
        r = rows[0]
        return SessionHead(
            r["tenant"], r["session_key"], r["version"], r["message_count"], r["archived_count"],
            r["token_total"], self._datetime(r["created_at"]), self._datetime(r["updated_at"]),
        )  # fmt: skip

    def session_keys(self, tenant: str, prefix: str, after: str | None, limit: int) -> list[str]:
        with self._reading() as read:
            rows = self._fetch(
                read,
                "SELECT session_key FROM ledger_sessions WHERE tenant = ? AND session_key > ? "
                "AND session_key >= ? AND session_key < ? AND substr(session_key, 1, ?) = ? "
                "ORDER BY session_key LIMIT ?",
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

    def _fetch(self, read: Reader, sql: str, params: Sequence[Any]) -> list[Any]:
        rows = read(sql, params)
        self.rows_read += len(rows)
        return rows
