"""The SQL key stores: SQLite (a file beside the ledger's tables) and PostgreSQL.

Both use the same statements; they differ in placeholders, connections and how
`migrate` and the first-admin insert are serialised across processes.
"""

from __future__ import annotations

import secrets
import sqlite3
from abc import abstractmethod
from collections.abc import Hashable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import unquote

from session_ledger.domain.errors import StoreNotReady

from .key_cache import NOTIFY_CHANNEL, KeyNotices
from .keystore import KeyRecord, KeyStore
from .sql_connections import SQLiteConnections, open_pool, postgres_cursor, sqlite_failure

TABLE = "ledger_api_keys"
# One row: how many revokes the key table has seen. Processes keep active keys while it
# stays where it was when they read them (key_cache.py).
VERSION_TABLE = "ledger_api_keys_version"
# The store's secrets by name; `migrate` makes each once (under its lock), never again.
SECRET_TABLE = "ledger_api_secrets"
FEED_CURSOR_SECRET = "feed cursor"
COLUMNS = "id, tenant, role, name, key_hash, created_at, revoked_at"
SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (id TEXT PRIMARY KEY, tenant TEXT NOT NULL, "
    "role TEXT NOT NULL, name TEXT NOT NULL, key_hash TEXT NOT NULL UNIQUE, "
    "created_at TEXT NOT NULL, revoked_at TEXT)",
    f"CREATE INDEX IF NOT EXISTS {TABLE}_tenant ON {TABLE} (tenant, created_at)",
    f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), "
    "version BIGINT NOT NULL)",
    f"INSERT INTO {VERSION_TABLE} (id, version) SELECT 1, 0 "
    f"WHERE NOT EXISTS (SELECT 1 FROM {VERSION_TABLE})",
    f"CREATE TABLE IF NOT EXISTS {SECRET_TABLE} (name TEXT PRIMARY KEY, secret TEXT NOT NULL)",
)
READ_VERSION = f"SELECT version FROM {VERSION_TABLE} WHERE id = 1"
# Any constant works; it only has to be the same in every process.
ADVISORY_LOCK_ID = 0x5E5510_0001
NOT_MIGRATED = "the API key table does not exist: run `session-ledger migrate`"


def _row(row: Sequence[Any]) -> KeyRecord:
    revoked = datetime.fromisoformat(row[6]) if row[6] else None
    return KeyRecord(
        id=row[0], tenant=row[1], role=row[2], name=row[3], key_hash=row[4],
        created_at=datetime.fromisoformat(row[5]), revoked_at=revoked,
    )  # fmt: skip


def _params(record: KeyRecord) -> tuple[str, ...]:
    return (
        record.id, record.tenant, record.role, record.name, record.key_hash,
        record.created_at.isoformat(),
    )  # fmt: skip


class _SQLKeyStore(KeyStore):
    """Statements shared by both backends, written with `?` placeholders."""

    placeholder = "?"

    @abstractmethod
    def _transaction(self, exclusive: bool = False) -> AbstractContextManager[Any]:
        """A cursor inside one transaction; `exclusive` serialises it across processes."""

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self.placeholder)

    def migrate(self) -> None:
        with self._transaction(exclusive=True) as cur:
            for statement in SCHEMA:
                cur.execute(statement)
            cur.execute(
                self._sql(f"INSERT INTO {SECRET_TABLE} (name, secret) VALUES (?, ?) "
                          "ON CONFLICT (name) DO NOTHING"),
                (FEED_CURSOR_SECRET, secrets.token_hex(32)),
            )  # fmt: skip

    def feed_cursor_secret(self) -> str:
        with self._transaction() as cur:
            cur.execute(
                self._sql(f"SELECT secret FROM {SECRET_TABLE} WHERE name = ?"),
                (FEED_CURSOR_SECRET,),
            )
            row = cur.fetchone()
        if row is None:
            raise StoreNotReady("the store has no feed cursor secret: run `session-ledger migrate`")
        return str(row[0])

    def ping(self) -> None:
        with self._transaction() as cur:
            cur.execute(f"SELECT 1 FROM {TABLE} LIMIT 1")

    def _insert(self, record: KeyRecord, only_if_empty: bool) -> bool:
        insert = f"INSERT INTO {TABLE} ({COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, NULL"
        if only_if_empty:
            insert += f" WHERE NOT EXISTS (SELECT 1 FROM {TABLE})"
        with self._transaction(exclusive=only_if_empty) as cur:
            cur.execute(self._sql(insert), _params(record))
            return bool(cur.rowcount == 1)

    def _by_hash(self, key_hash: str) -> KeyRecord | None:
        with self._transaction() as cur:
            cur.execute(self._sql(f"SELECT {COLUMNS} FROM {TABLE} WHERE key_hash = ?"), (key_hash,))
            row = cur.fetchone()
        return _row(row) if row else None

    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        query = f"SELECT {COLUMNS} FROM {TABLE}"
        params: tuple[str, ...] = ()
        if tenant is not None:
            query, params = query + " WHERE tenant = ?", (tenant,)
        with self._transaction() as cur:
            cur.execute(self._sql(query + " ORDER BY created_at, id"), params)
            return [_row(row) for row in cur.fetchall()]

    def _set_revoked(self, key_id: str, tenant: str | None, when: datetime) -> bool:
        update = f"UPDATE {TABLE} SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?"
        params: tuple[str, ...] = (when.isoformat(), key_id)
        if tenant is not None:
            update, params = update + " AND tenant = ?", (*params, tenant)
        with self._transaction() as cur:
            cur.execute(self._sql(update), params)
            if cur.rowcount != 1:
                return False
            cur.execute(f"UPDATE {VERSION_TABLE} SET version = version + 1 WHERE id = 1")
            self._revoked(cur)
            return True

    def _revoked(self, cur: Any) -> None:
        """Inside the revoke's transaction: tell other processes, where the store can."""


class SQLiteKeyStore(_SQLKeyStore):
    """Keys in the ledger's SQLite file, at most `pool_size` connections."""

    def __init__(self, database_url: str, *, lock_timeout: float = 30, pool_size: int = 8) -> None:
        super().__init__()
        self.path = unquote(database_url.removeprefix("sqlite:///"))
        self.connections = SQLiteConnections(self.path, lock_timeout, size=pool_size)

    def close(self) -> None:
        self.connections.close()

    def _version(self) -> Hashable:
        # One statement, no BEGIN/COMMIT around it: a read of one row by its key.
        with self.connections.connection() as conn:
            try:
                row = conn.execute(READ_VERSION).fetchone()
            except sqlite3.OperationalError as exc:
                raise sqlite_failure(exc, NOT_MIGRATED) from None
        return row[0] if row else None

    def _lookup(self, key_hash: str, version: Hashable) -> tuple[KeyRecord | None, Hashable]:
        with self._transaction() as cur:  # one read transaction: the key as of its version
            cur.execute(READ_VERSION)
            row = cur.fetchone()
            cur.execute(f"SELECT {COLUMNS} FROM {TABLE} WHERE key_hash = ?", (key_hash,))
            found = cur.fetchone()
        return (_row(found) if found else None), (row[0] if row else None)

    def _transaction(self, exclusive: bool = False) -> AbstractContextManager[sqlite3.Cursor]:
        if exclusive:
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        return self.connections.transaction(NOT_MIGRATED, lock=exclusive)


class PostgresKeyStore(_SQLKeyStore):
    """Keys in PostgreSQL, through a small connection pool."""

    placeholder = "%s"

    def __init__(self, database_url: str, *, pool_size: int = 4, connect_wait: float = 30) -> None:
        super().__init__()
        self.notices = KeyNotices(database_url)
        self.notices.start()
        # Every request authenticates here first: during an outage it waits `connect_wait`
        # for a connection, then answers 503, rather than holding the request.
        self.pool = open_pool(database_url, size=pool_size, wait=connect_wait)

    def close(self) -> None:
        self.notices.close()
        self.pool.close()

    def _version(self) -> Hashable:
        return self.notices.version

    def _revoked(self, cur: Any) -> None:
        cur.execute(f"NOTIFY {NOTIFY_CHANNEL}")

    @contextmanager
    def _transaction(self, exclusive: bool = False) -> Iterator[Any]:
        with postgres_cursor(self.pool, NOT_MIGRATED) as cur:
            if exclusive:
                # CREATE TABLE IF NOT EXISTS can still collide in the catalog when two
                # processes run it at once; the advisory lock queues them instead.
                cur.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_ID,))
            yield cur
