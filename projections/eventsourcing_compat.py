"""Every place the ledger reaches past the eventsourcing library's documented API.

There is one: the SQLite connection pool's `_create_connection`, overridden so that each
connection fsyncs every commit (`synchronous=FULL`), zeroes what a delete frees
(`secure_delete`), leaves checkpoints to
`wal_checkpoints.py`, and keeps the prepared statements of
a write (the library asks sqlite3 for a statement cache of `True`, that is of one
statement, so every statement of a write was compiled again) and makes a new database
file 0600 first (sqlite_files.py). Everything else the
ledger uses is the library's public or documented API. A write touches:

- `EventStore.put` with keyword arguments, which reach the recorder's `_insert_events`
  hook inside its transaction (as in the library's searchable-timestamps example); the
  SQLite recorder's `insert_events` returns no notification ids, so `put` builds no
  Recording objects (nothing reads them);
- `Application.construct_mapper` and the factory's `mapper(transcoder, mapper_class)`:
  a `Mapper` subclass overriding `to_stored_event` (domain/event_mapper.py) that writes
  the bytes `JSONTranscoder.encode` would, the messages' as parsed and the rest by
  orjson where its bytes are the same (a datetime as the transcoder's registered
  transcoding in `JSONTranscoder.types` writes it), else by the transcoder (with a
  master key, the factory's `mapper` returns one that seals content: sealing.py);
- the repository's `cache` (`LRUCache.get`, `put`); `Repository.get` when not cached;
- on SQLite, one write transaction object (write_turns.py) made of the pool's
  `get_connection(is_writer=True)` and `put_connection`, the connection's `cursor()`
  (begun IMMEDIATE by the ledger), `SQLiteTransaction`'s exit (COMMIT or ROLLBACK, the
  library's errors) and `SQLiteCursor.sqlite_cursor`;
- `create_table`;
- on a read, the recorders' `select_events`, overridden to check the session's cached
  data key first (another process may have erased the session: key_rows.py).

`tests/unit/test_eventsourcing_compat.py` fails loudly when a library release changes
what this relies on; the `eventsourcing` pin in pyproject.toml names the releases tested.
"""

from __future__ import annotations

import sqlite3

from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool

from .driver_errors import SQLITE
from .sqlite_files import create_private
from .wal_checkpoints import AUTOCHECKPOINT_OFF

STATEMENT_CACHE = 256  # prepared statements kept per connection
# A write's wait for a lock when the environment names none (`memory://`; a file store's
# environment names LEDGER_LOCK_TIMEOUT_SECONDS): sqlite3's own default.
SQLITE_LOCK_WAIT_SECONDS = 5.0


class DurableSQLitePool(SQLiteConnectionPool):
    """The library's pool, whose connections are in WAL mode (file databases; checkpointed
    by `WalCheckpoints`, not on commit), fsync every commit and keep their prepared
    statements."""

    def _create_connection(self) -> SQLiteConnection:
        create_private(self.db_name)
        try:
            conn = sqlite3.connect(
                self.db_name,
                uri=True,
                check_same_thread=False,
                isolation_level=None,
                cached_statements=STATEMENT_CACHE,
                timeout=self.lock_timeout or SQLITE_LOCK_WAIT_SECONDS,
            )
        except sqlite3.Error as e:
            raise SQLITE.unconnected(e) from e
        if not self.is_sqlite_memory_mode:
            conn.execute("PRAGMA journal_mode=WAL")
            # Checkpoints run after a write's turn, not in its COMMIT (wal_checkpoints.py).
            conn.execute(AUTOCHECKPOINT_OFF)
        conn.execute("PRAGMA synchronous=FULL")
        # What a delete frees is overwritten with zeros (a deleted data key leaves no
        # bytes in the file's free space): many builds' default (Debian's), set here for
        # every build.
        conn.execute("PRAGMA secure_delete=ON")
        conn.row_factory = sqlite3.Row
        return SQLiteConnection(sqlite_conn=conn, max_age=self.max_age)
