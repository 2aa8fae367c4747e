"""Every place the ledger reaches past the eventsourcing library's documented API.

There is one: the SQLite connection pool's `_create_connection`, overridden so that each
connection fsyncs every commit (`synchronous=FULL`) and keeps the prepared statements of
a write (the library asks sqlite3 for a statement cache of `True`, that is of one
statement, so every statement of a write was compiled again) and makes a new database
file 0600 first (sqlite_files.py). Everything else the
ledger uses is the library's public or documented API: `Application.save` with
`saved_kwargs`, the recorder's `_insert_events` hook (as in the library's
searchable-timestamps example), `MAPPER_TOPIC`-free mappers (with a master key, the
factory's `mapper` returns a `Mapper` subclass that seals content: sealing.py),
`create_table`.

`tests/unit/test_eventsourcing_compat.py` fails loudly when a library release changes
what this relies on; the `eventsourcing` pin in pyproject.toml names the releases tested.
"""

from __future__ import annotations

import sqlite3

from eventsourcing.sqlite import SQLiteConnection, SQLiteConnectionPool

from .driver_errors import SQLITE
from .sqlite_files import create_private

STATEMENT_CACHE = 256  # prepared statements kept per connection
# A write's wait for a lock when the environment names none (`memory://`; a file store's
# environment names LEDGER_LOCK_TIMEOUT_SECONDS): sqlite3's own default.
SQLITE_LOCK_WAIT_SECONDS = 5.0


class DurableSQLitePool(SQLiteConnectionPool):
    """The library's pool, whose connections are in WAL mode (file databases), fsync every
    commit and keep their prepared statements."""

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
        conn.execute("PRAGMA synchronous=FULL")
        conn.row_factory = sqlite3.Row
        return SQLiteConnection(sqlite_conn=conn, max_age=self.max_age)
