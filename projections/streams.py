"""The streams view: one row per stream of a session (who opened it, its text so far, how
it ended), written in the transaction of each stream event; and its reads."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from session_ledger.domain.ports import StreamView

from .changes import ExtendStream, OpenStream
from .dialect import ViewStore

STREAM_COLUMNS = (
    "session_id, stream_id, opened_version, role, turn, parent, state, text, updated_at,"
    " ended_version, cause"
)
OPEN = "open"


class StreamViews(ViewStore):
    """Writes and reads of `ledger_streams`."""

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

    def open_stream_text(self, session_id: uuid.UUID, text: str) -> str:
        """A stream row's text as read (a store that seals content opens it here)."""
        return text

    def stream_view(self, session_id: uuid.UUID, stream_id: str) -> StreamView | None:
        with self._reading() as read:
            rows = read(
                f"SELECT {STREAM_COLUMNS} FROM ledger_streams WHERE session_id = ?"
                " AND stream_id = ?",
                (self._sid(session_id), stream_id),
            )
        if not rows:
            return None
        r = rows[0]
        return StreamView(
            r["stream_id"], r["role"], r["turn"], r["parent"], r["state"],
            self.open_stream_text(session_id, r["text"]),
            r["opened_version"], r["ended_version"], r["cause"], self._datetime(r["updated_at"]),
        )  # fmt: skip

    def idle_streams(self, before: datetime, limit: int) -> list[tuple[str, str, str]]:
        """(tenant, key, stream id) of open streams with no event since `before`."""
        with self._reading() as read:
            rows = read(
                "SELECT s.tenant, s.session_key, t.stream_id FROM ledger_streams t"
                " JOIN ledger_sessions s ON s.session_id = t.session_id"
                " WHERE t.state = ? AND t.updated_at < ? ORDER BY t.updated_at LIMIT ?",
                (OPEN, self._time(before), limit),
            )
        return [(r["tenant"], r["session_key"], r["stream_id"]) for r in rows]
