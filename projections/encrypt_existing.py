"""Sealing a session stored clear: what `SessionEncrypted` does to the store, in the
transaction that records it (docs/compliance.md, "Encrypting an existing store").

A session that started before a master key was configured has its content in clear
bytes: in its events' stored records and in its view rows. Crypto-shredding needs that
content under a key of its own, so this rewrites it: a new data key (its row added in
this transaction), every earlier record with its content fields sealed, every message
body and stream text of the views sealed, and the hash chain (over the stored bytes)
computed again over the rewritten records. The event that asks for it records the head
before, so the rewrite is itself on the record; the chain after it verifies with no key.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from session_ledger.domain.integrity import chain_hashes

from .dialect import Dialect
from .sealing import SEALED_BODY, DataKeys, seal_body, seal_fields

# The body columns of the message tables, and the columns that name a row of each.
MESSAGE_TABLES = {
    "ledger_messages": "session_id, status, message_id",
    "ledger_ended_messages": "session_id, status, message_id, valid_from",
}


class ClearSessionSealing:
    """Seals a session stored clear, inside the write of its `SessionEncrypted` (with the
    data keys: none configured, nothing to seal with)."""

    def __init__(self, dialect: Dialect, data_keys: DataKeys | None) -> None:
        self.data_keys = data_keys
        self._execute = dialect.execute
        self._sid = dialect.sid
        self._time = dialect.time

    def seal_session(self, cursor: Any, session_id: uuid.UUID, version: int) -> None:
        """Seal the records before `version` and the session's view rows under a new data
        key. Nothing to do when the session has a data key already (sealed since)."""
        keys, sid = self.data_keys, self._sid(session_id)
        if keys is None:
            return
        self._execute(cursor, "SELECT 1 AS found FROM ledger_data_keys WHERE session_id = ?",
                      (sid,))  # fmt: skip
        if cursor.fetchone() is not None:
            return
        raw = AESGCM.generate_key(bit_length=256)
        key = AESGCM(raw)
        kid, wrapped = keys.master.wrap(session_id, raw)
        self._execute(cursor, "INSERT INTO ledger_data_keys (session_id, master_key_id, wrapped,"
                      " created_at) VALUES (?, ?, ?, ?)",
                      (sid, kid, wrapped, self._time(datetime.now(UTC))))  # fmt: skip
        records = self._sealed_records(cursor, session_id, key, version, keys.transcoder)
        for (v, _, _), h in zip(records, chain_hashes(session_id, records), strict=True):
            self._execute(cursor, "UPDATE ledger_timeline SET chain = ? WHERE session_id = ? "
                          "AND version = ?", (h, sid, v))  # fmt: skip
        for table, names in MESSAGE_TABLES.items():
            self._seal_bodies(cursor, session_id, key, table, names)
        self._execute(cursor, "SELECT stream_id, text FROM ledger_streams WHERE session_id = ?",
                      (sid,))  # fmt: skip
        for row in cursor.fetchall():
            if row["text"] and not row["text"].startswith(SEALED_BODY):
                # one sealed line, which the stream's later pieces follow (`open_stream_text`)
                text = seal_body(key, session_id, row["text"]) + "\n"
                self._execute(cursor, "UPDATE ledger_streams SET text = ? WHERE session_id = ? "
                              "AND stream_id = ?", (text, sid, row["stream_id"]))  # fmt: skip
        keys.forget(session_id)

    def _sealed_records(
        self, cursor: Any, session_id: uuid.UUID, key: AESGCM, version: int, transcoder: Any
    ) -> list[tuple[int, str, bytes]]:
        """The records before `version`, each with its content fields sealed (rewritten in
        the store where they changed): (version, topic, state) in version order."""
        sid = self._sid(session_id)
        self._execute(cursor, "SELECT originator_version, topic, state FROM ledger_events WHERE "
                      "originator_id = ? AND originator_version < ? ORDER BY originator_version",
                      (sid, version))  # fmt: skip
        records = []
        for row in cursor.fetchall():
            v, state = row["originator_version"], bytes(row["state"])
            fields = transcoder.decode(state)
            if seal_fields(fields, key, session_id):
                state = transcoder.encode(fields)
                self._execute(cursor, "UPDATE ledger_events SET state = ? WHERE originator_id = ?"
                              " AND originator_version = ?", (state, sid, v))  # fmt: skip
            records.append((v, row["topic"], state))
        return records

    def _seal_bodies(
        self, cursor: Any, session_id: uuid.UUID, key: AESGCM, table: str, names: str
    ) -> None:
        sid = self._sid(session_id)
        self._execute(cursor, f"SELECT {names}, message FROM {table} WHERE session_id = ?",
                      (sid,))  # fmt: skip
        where = " AND ".join(f"{name} = ?" for name in names.split(", "))
        for row in cursor.fetchall():
            body = row["message"]
            if body.startswith(SEALED_BODY):
                continue
            ids = tuple(row[name] for name in names.split(", "))
            self._execute(cursor, f"UPDATE {table} SET message = ? WHERE {where}",
                          (seal_body(key, session_id, body), *ids))  # fmt: skip
