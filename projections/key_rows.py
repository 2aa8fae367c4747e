"""The data key table (each session's data key, wrapped by a master key: `sealing.py`),
and the session content as the views keep it: sealed on its way in, opened on its way
out."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from session_ledger.domain.ports import WriteBatch

from .changes import ExtendStream, InsertMessages, ViewChanges, view_changes
from .dialect import Dialect
from .sealing import SEALED_BODY, DataKeys, KeylessSeals, no_master_key, open_bodies, seal_body

# Tables whose rows hold a session's content (its message bodies): erasure deletes them.
CONTENT_TABLES = ("ledger_messages", "ledger_ended_messages", "ledger_streams")


class DataKeyTable:
    """Reads and writes of `ledger_data_keys` (the `DataKeyStore` of `sealing.DataKeys`)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def data_key_row(self, session_id: uuid.UUID) -> tuple[str, bytes] | None:
        d = self.dialect
        with d.reading() as read:
            rows = read("SELECT master_key_id, wrapped FROM ledger_data_keys WHERE "
                        "session_id = ?", (d.sid(session_id),))  # fmt: skip
        return (rows[0]["master_key_id"], bytes(rows[0]["wrapped"])) if rows else None

    def holds_keys(self) -> bool:
        """Whether any session of the store has a data key (its content sealed)."""
        with self.dialect.reading() as read:
            return bool(read("SELECT 1 AS found FROM ledger_data_keys LIMIT 1", ()))

    def add_data_key_row(
        self, session_id: uuid.UUID, kid: str, wrapped: bytes, created: datetime
    ) -> None:
        d = self.dialect
        with d.committing() as cursor:
            d.execute(cursor, "INSERT INTO ledger_data_keys (session_id, master_key_id, "
                      "wrapped, created_at) VALUES (?, ?, ?, ?) ON CONFLICT (session_id) "
                      "DO NOTHING", (d.sid(session_id), kid, wrapped, d.time(created)))  # fmt: skip


class SessionContent:
    """Seals view bodies and opens them, with the sessions' data keys (None: no master key
    configured, content stays clear). Without one, a sealed body read (on a store that
    holds sealed sessions: `keyless`) is refused naming the setting: read as clear, it
    was an answer that is not JSON."""

    def __init__(self, data_keys: DataKeys | None, keyless: KeylessSeals | None = None) -> None:
        self.data_keys = data_keys
        self._keyless = keyless if data_keys is None else None

    def sealed(self, session_id: uuid.UUID) -> bool:
        return self.data_keys is not None and self.data_keys.key(session_id) is not None

    def can_seal(self) -> bool:
        return self.data_keys is not None

    def view_changes(self, batch: WriteBatch) -> ViewChanges:
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

    def opened(
        self, session_id: uuid.UUID, rows: Sequence[Sequence[Any]], at: int = 1
    ) -> Sequence[Any]:
        """`rows` with their body (column `at`) opened where sealed, after the read."""
        if self.data_keys is not None:
            return open_bodies(self.data_keys, session_id, rows, at)
        if (self._keyless is not None and self._keyless.held()
                and any(r[at][:1] == SEALED_BODY for r in rows)):  # fmt: skip
            raise no_master_key(session_id)
        return rows

    def open_stream_text(self, session_id: uuid.UUID, text: str) -> str:
        """A stream row's text, its sealed lines opened."""
        if not text.startswith(SEALED_BODY):
            return text
        if self.data_keys is None:
            raise no_master_key(session_id)
        lines = [(line,) for line in text.split("\n") if line]
        return "".join(row[0] for row in open_bodies(self.data_keys, session_id, lines, at=0))

    def keyed_digest(self, digest: str) -> str:
        """A keyed write's request digest as it is stored (`MasterKeys.keyed_digest`;
        as given without a master key: the content is stored clear then)."""
        return digest if self.data_keys is None else self.data_keys.master.keyed_digest(digest)

    def same_request(self, stored: str | None, digest: str) -> bool:
        """Whether a stored request digest is that of the request whose SHA-256 is
        `digest`."""
        if self.data_keys is None:
            return stored == digest
        return self.data_keys.master.same_request(stored, digest)

    def forget(self, session_id: uuid.UUID) -> None:
        """The session's content was erased: its data key is gone."""
        if self.data_keys is not None:
            self.data_keys.forget(session_id)

    def recheck(self, session_id: uuid.UUID | str) -> None:
        """Before a read of the session's events (the recorders' `select_events`): whether
        its data key is still stored (another process may have erased the session), so
        that no read that starts after an erasure committed opens its content."""
        if self.data_keys is not None and isinstance(session_id, uuid.UUID):
            self.data_keys.recheck(session_id)
