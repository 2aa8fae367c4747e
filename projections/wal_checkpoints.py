"""SQLite's WAL checkpoints run after a write has let go of its turn, not inside it.

By default SQLite checkpoints in the COMMIT that takes the WAL past 1,000 pages: the
committing connection copies every page of the WAL into the database file and syncs it
before its COMMIT returns, and so while its writer still holds the turn (write_turns.py)
that every other writer of the file waits for. After a write of 28 MiB (56 MiB of pages:
the event's record and the message rows) that copy was 300-700 ms of the 0.7-1.8 s the
turn was held, and any write arriving meanwhile waited for it, though a checkpoint does
not need the write lock: SQLite's passive checkpoint runs beside writers.

So the ledger's connections do not checkpoint on commit (`wal_autocheckpoint=0`, set by
the pool), and a writer, once its transaction has committed and it has given back its
turn and the group commit's lock (group_commit.py), runs a passive checkpoint on a
reading connection when the writes since the last one may have filled about as many
pages as SQLite's own default would wait for. The pages are estimated: each transaction
a few (its rows and their indexes), and the records' bytes twice over (the event, and
the message rows that hold its text again). An estimate off either way
only moves when the WAL is copied, never what a read sees; a checkpoint that fails (the
database busy) is left to the next one; SQLite also checkpoints when its last connection
closes.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable
from contextlib import AbstractContextManager

from eventsourcing.persistence import PersistenceError

from .sql import Reader

PAGE_BYTES = 4096  # SQLite's default page size
CHECKPOINT_PAGES = 1000  # SQLite's default wal_autocheckpoint
TRANSACTION_PAGES = 8  # a small write's WAL frames (bench.diagnostics.write_cost: about 6)
AUTOCHECKPOINT_OFF = "PRAGMA wal_autocheckpoint=0"
CHECKPOINT = "PRAGMA wal_checkpoint(PASSIVE)"


class WalCheckpoints:
    """Counts the pages a store's write transactions may have added to its WAL, and
    checkpoints it when they reach `pages`; see the module's docstring."""

    __slots__ = ("_checkpointing", "_reading", "_written", "checkpoints", "pages")

    def __init__(
        self,
        reading: Callable[[], AbstractContextManager[Reader]],
        pages: int = CHECKPOINT_PAGES,
    ) -> None:
        """`reading()`: a reader on a connection of the store that holds no write
        transaction; `pages`: the WAL pages between checkpoints."""
        self._reading = reading
        self.pages = pages
        self._written = 0  # pages since the last checkpoint (estimated)
        self._checkpointing = threading.Lock()
        self.checkpoints = 0  # checkpoints run

    def committed(self, record_bytes: int = 0) -> None:
        """After a write transaction committed and gave back its turn (and the group
        commit's lock): records of `record_bytes` were stored (each kept twice: the event,
        and the view rows holding its text); a checkpoint if one is due."""
        self._written += TRANSACTION_PAGES + 2 * record_bytes // PAGE_BYTES
        if self._written < self.pages or not self._checkpointing.acquire(blocking=False):
            return
        try:
            self._written = 0
            self.checkpoints += 1
            with self._reading() as read:
                read(CHECKPOINT, ())
        except (sqlite3.Error, PersistenceError):
            pass  # the write has committed; the next write's checkpoint tries again
        finally:
            self._checkpointing.release()
