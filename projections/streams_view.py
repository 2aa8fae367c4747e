"""The streams view: one row per stream of a session (who opened it, its text so far, how
it ended), written in the transaction of each stream event (`view_writes.py`); its reads."""

from __future__ import annotations

import uuid
from datetime import datetime

from session_ledger.domain.ports import StreamView

from .dialect import Dialect
from .key_rows import SessionContent

STREAM_COLUMNS = (
    "session_id, stream_id, opened_version, role, turn, parent, state, text, updated_at,"
    " ended_version, cause"
)
OPEN = "open"


class StreamsView:
    """Reads of `ledger_streams` (its rows are written by `view_writes.ViewWriter`).

    A stream's text is read through the session content, which opens its sealed lines:
    the one form of the text a read gives, sealed or not."""

    def __init__(self, dialect: Dialect, content: SessionContent) -> None:
        self.dialect = dialect
        self.content = content

    def stream_view(self, session_id: uuid.UUID, stream_id: str) -> StreamView | None:
        d = self.dialect
        with d.reading() as read:
            rows = read(
                f"SELECT {STREAM_COLUMNS} FROM ledger_streams WHERE session_id = ?"
                " AND stream_id = ?",
                (d.sid(session_id), stream_id),
            )
        if not rows:
            return None
        r = rows[0]
        return StreamView(
            r["stream_id"], r["role"], r["turn"], r["parent"], r["state"],
            self.content.open_stream_text(session_id, r["text"]),
            r["opened_version"], r["ended_version"], r["cause"], d.datetime(r["updated_at"]),
        )  # fmt: skip

    def idle_streams(self, before: datetime, limit: int) -> list[tuple[str, str, str]]:
        """(tenant, key, stream id) of open streams with no event since `before`."""
        d = self.dialect
        with d.reading() as read:
            rows = read(
                "SELECT s.tenant, s.session_key, t.stream_id FROM ledger_streams t"
                " JOIN ledger_sessions s ON s.session_id = t.session_id"
                " WHERE t.state = ? AND t.updated_at < ? ORDER BY t.updated_at LIMIT ?",
                (OPEN, d.time(before), limit),
            )
        return [(r["tenant"], r["session_key"], r["stream_id"]) for r in rows]
