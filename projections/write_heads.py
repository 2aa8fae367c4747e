"""What the last write of each session left in its timeline row (version, chain hash,
token total), held in memory so that the next append need not read that row again.

An append's timeline row extends the chain from h_{v-1} and adds its tokens to the total
of version v-1: both are in the row v-1, which the writer read (and the token total in a
subquery) on every write. Here the view writer notes the row it writes, and the next
write of that session starts from it when it follows that version.

When a noted row may not be what the store holds, the note is not used:
- a write noted in a transaction that then rolled back: a later write of that version in
  this process notes its own row first (writes take turns), and one by another process
  is seen below;
- another connection (another process, or this process's other connection) committed
  since this one last wrote: SQLite's `PRAGMA data_version` on the writing connection
  tells, in the write's own transaction, and every note is dropped;
- a write that does more than append (ends rows, erases, seals, starts nothing new) or
  re-derives the views (`rebuild`): its session's note is dropped, not replaced.
Only SQLite's connections say whether another wrote; on any other store nothing is held.
The connection is found through `sqlite_cursor`, the attribute of the library's public
`SQLiteCursor` that holds sqlite3's cursor (`tests/integration/test_write_heads.py`
fails if a release renames it: nothing would be noted, and no row left unread).
"""

from __future__ import annotations

import sqlite3
import uuid
from typing import Any

MAX_HEADS = 10_000  # sessions noted before the notes start over (a bounded memory)


class WriteHeads:
    """Per session: (version, chain hash, token total) of the last row this process's
    writes wrote; see the module's docstring. Used inside write transactions, which take
    turns, so without a lock of its own."""

    __slots__ = ("_connection", "_heads", "_seen")

    def __init__(self) -> None:
        self._heads: dict[uuid.UUID, tuple[int, bytes | None, int]] = {}
        self._connection: Any = None  # the connection of the last write (held: never reused)
        self._seen = -1  # its data_version then

    def usable(self, cursor: Any) -> bool:
        """Whether notes may be used and taken in the write transaction of `cursor` (a
        SQLite cursor, bare or the library's): drops every note when another connection
        committed since the last write."""
        raw = getattr(cursor, "sqlite_cursor", cursor)
        if not isinstance(raw, sqlite3.Cursor):
            return False
        connection = raw.connection
        raw.execute("PRAGMA data_version")
        seen = raw.fetchone()[0]
        if connection is not self._connection or seen != self._seen:
            self._heads.clear()
            self._connection, self._seen = connection, seen
        return True

    def before(self, session_id: uuid.UUID, version: int) -> tuple[bytes | None, int] | None:
        """The chain hash and token total of the session's row `version`, when noted."""
        head = self._heads.get(session_id)
        if head is None or head[0] != version:
            return None
        return head[1], head[2]

    def note(self, session_id: uuid.UUID, version: int, chain: bytes | None, total: int) -> None:
        if len(self._heads) >= MAX_HEADS:
            self._heads.clear()
        self._heads[session_id] = (version, chain, total)

    def drop(self, session_id: uuid.UUID) -> None:
        self._heads.pop(session_id, None)
