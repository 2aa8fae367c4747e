"""The data key table: each session's data key, wrapped by a master key (`sealing.py`),
and what a session's erasure removes in the transaction that records it."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from session_ledger.domain.ports import WriteBatch

from .changes import ExtendStream, InsertMessages, ViewChanges, view_changes
from .dialect import ViewStore
from .sealing import SEALED_BODY, open_bodies, seal_body

# Tables whose rows hold a session's content (its message bodies): erasure deletes them.
CONTENT_TABLES = ("ledger_messages", "ledger_ended_messages", "ledger_streams")


class DataKeyRows(ViewStore):
    """Reads and writes of `ledger_data_keys`; seals and opens view bodies."""

    def data_key_row(self, session_id: uuid.UUID) -> tuple[str, bytes] | None:
        with self._reading() as read:
            rows = read("SELECT master_key_id, wrapped FROM ledger_data_keys WHERE "
                        "session_id = ?", (self._sid(session_id),))  # fmt: skip
        return (rows[0]["master_key_id"], bytes(rows[0]["wrapped"])) if rows else None

    def add_data_key_row(
        self, session_id: uuid.UUID, kid: str, wrapped: bytes, created: datetime
    ) -> None:
        with self._committing() as cursor:
            self._execute(cursor, "INSERT INTO ledger_data_keys (session_id, master_key_id, "
                          "wrapped, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (session_id) "
                          "DO NOTHING", (self._sid(session_id), kid, wrapped,
                                         self._time(created)))  # fmt: skip

    def sealed(self, session_id: uuid.UUID) -> bool:
        return self.data_keys is not None and self.data_keys.key(session_id) is not None

    def can_seal(self) -> bool:
        return self.data_keys is not None

    def _view_changes(self, batch: WriteBatch) -> ViewChanges:
        """The write's row changes, sealed (`sealed_changes`)."""
        return self.sealed_changes(view_changes(batch))

    def sealed_changes(self, vc: ViewChanges) -> ViewChanges:
        """`vc` with each new message body, and each piece of a stream's text, sealed under
        the session's data key, when it has one. A stream's pieces are appended to its
        row's text one sealed line each (`open_stream_text` reads them)."""
        content = (InsertMessages, ExtendStream)
        if self.data_keys is None or not any(isinstance(c, content) for c in vc.changes):
            return vc
        key = self.data_keys.key(vc.session_id)
        if key is None:
            return vc
        sid = vc.session_id

        def sealed(c: Any) -> Any:
            if isinstance(c, InsertMessages):
                return c._replace(rows=tuple(r._replace(body=seal_body(key, sid, r.body))
                                             for r in c.rows))  # fmt: skip
            if isinstance(c, ExtendStream) and c.text:
                return c._replace(text=seal_body(key, sid, c.text) + "\n")
            return c

        return vc._replace(changes=tuple(sealed(c) for c in vc.changes))

    def open_stream_text(self, session_id: uuid.UUID, text: str) -> str:
        """A stream row's text, its sealed lines opened."""
        if not text.startswith(SEALED_BODY):
            return text
        lines = [(line,) for line in text.split("\n") if line]
        return "".join(row[0] for row in open_bodies(self.data_keys, session_id, lines, at=0))

    def _erase_content(self, cursor: Any, session_id: uuid.UUID) -> None:
        """Drop every row that held the session's content, its data key, and the token
        counts that were measured from it."""
        sid = self._sid(session_id)
        for table in (*CONTENT_TABLES, "ledger_data_keys"):
            self._execute(cursor, f"DELETE FROM {table} WHERE session_id = ?", (sid,))
        self._execute(cursor, "UPDATE ledger_timeline SET token_total = 0 WHERE session_id = ?",
                      (sid,))  # fmt: skip
        if self.data_keys is not None:
            self.data_keys.forget(session_id)
