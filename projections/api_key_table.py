"""The API keys' table beside the ledger's, and beside it the store's own secrets (the
one that seals the tenant tail's cursors): `KeyTable`, kept in memory, on SQLite or on
PostgreSQL. What a key means (its secret's hash, its roles, the process's cache of
active keys) is the API's (`api/keystore.py`); the rows are here.

Both SQL tables run the same statements, written with `?` placeholders, through their
dialect's `TableConnections`; they differ in how a process learns that the table's
version moved (SQLite reads its one-row version table, PostgreSQL listens for the
revoke's NOTIFY) and in how `migrate` and the first key are serialised.
"""

from __future__ import annotations

import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from session_ledger.domain.errors import StoreNotReady

from .dialect import TableConnections
from .table_connections import Notices, SQLiteTableConnections

TABLE = "ledger_api_keys"
# One row: how many revokes the key table has seen. Processes keep active keys while it
# stays where it was when they read them (api/key_cache.py).
VERSION_TABLE = "ledger_api_keys_version"
# The store's secrets by name; `migrate` makes each once (under its lock), never again.
SECRET_TABLE = "ledger_api_secrets"
FEED_CURSOR_SECRET = "feed cursor"
NOTIFY_CHANNEL = "ledger_api_keys"  # PostgreSQL: every revoke notifies it
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
BY_HASH = f"SELECT {COLUMNS} FROM {TABLE} WHERE key_hash = ?"
# PostgreSQL's advisory lock of `migrate` and the first key: any constant works; it only
# has to be the same in every process.
LOCK_ID = 0x5E5510_0001
NOT_MIGRATED = "the API key table does not exist: run `session-ledger migrate`"


@dataclass(frozen=True)
class KeyRecord:
    """An API key without its secret."""

    id: str
    tenant: str
    role: str
    name: str
    key_hash: str
    created_at: datetime
    revoked_at: datetime | None = None


class KeyTable(ABC):
    """API keys by id and by the hash of their secret; tables from `migrate()`, safe when
    processes race."""

    @abstractmethod
    def migrate(self) -> None: ...

    @abstractmethod
    def insert(self, record: KeyRecord, only_if_empty: bool) -> bool:
        """Store `record`; with `only_if_empty`, only when the table holds no key (atomic)."""

    @abstractmethod
    def by_hash(self, key_hash: str) -> KeyRecord | None: ...

    @abstractmethod
    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        """Every key (of one tenant), oldest first, revoked ones included."""

    @abstractmethod
    def set_revoked(self, key_id: str, tenant: str | None, when: datetime) -> bool:
        """Revoke the key (of `tenant`, when given) at `when` unless it was before, and
        move the table's version; False: no such key."""

    @abstractmethod
    def version(self) -> Hashable:
        """The table's version as this process knows it now; None: trust no cached key."""

    def lookup(self, key_hash: str, version: Hashable) -> tuple[KeyRecord | None, Hashable]:
        """The key with this hash and the version it was read at (tables that can read
        both in one transaction say so)."""
        return self.by_hash(key_hash), version

    @abstractmethod
    def ping(self) -> None:
        """Raise StoreNotReady unless the key table can be read."""

    @abstractmethod
    def feed_cursor_secret(self) -> str:
        """The store's secret for the tenant tail's cursors: 32 random bytes (hex), made
        once per store by `migrate`, so every process of the store reads the same."""

    def close(self) -> None:  # noqa: B027 - only the SQL tables hold connections
        """Release connections."""


class MemoryKeyTable(KeyTable):
    """Keys in a dict: for `memory://` ledgers and unit tests."""

    def __init__(self) -> None:
        self._keys: dict[str, KeyRecord] = {}
        self._lock = threading.Lock()
        self._revocations = 0
        self._feed_cursor_secret = secrets.token_hex(32)  # the store lives in one process

    def migrate(self) -> None:
        return None

    def ping(self) -> None:
        return None

    def feed_cursor_secret(self) -> str:
        return self._feed_cursor_secret

    def version(self) -> Hashable:
        return self._revocations

    def insert(self, record: KeyRecord, only_if_empty: bool) -> bool:
        with self._lock:
            if only_if_empty and self._keys:
                return False
            self._keys[record.id] = record
            return True

    def by_hash(self, key_hash: str) -> KeyRecord | None:
        with self._lock:
            return next((r for r in self._keys.values() if r.key_hash == key_hash), None)

    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        with self._lock:
            records = [r for r in self._keys.values() if tenant in (None, r.tenant)]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def set_revoked(self, key_id: str, tenant: str | None, when: datetime) -> bool:
        with self._lock:
            record = self._keys.get(key_id)
            if record is None or tenant not in (None, record.tenant):
                return False
            if record.revoked_at is None:
                self._keys[key_id] = KeyRecord(**{**record.__dict__, "revoked_at": when})
                self._revocations += 1
            return True


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


class SQLKeyTable(KeyTable):
    """The statements both SQL tables run, through their dialect's connections."""

    def __init__(self, connections: TableConnections) -> None:
        self.connections = connections

    def close(self) -> None:
        self.connections.close()

    def migrate(self) -> None:
        conns = self.connections
        with conns.transaction(serial=True) as cur:
            for statement in SCHEMA:
                conns.execute(cur, statement)
            conns.execute(
                cur,
                f"INSERT INTO {SECRET_TABLE} (name, secret) VALUES (?, ?) "
                "ON CONFLICT (name) DO NOTHING",
                (FEED_CURSOR_SECRET, secrets.token_hex(32)),
            )

    def feed_cursor_secret(self) -> str:
        conns = self.connections
        with conns.transaction() as cur:
            conns.execute(cur, f"SELECT secret FROM {SECRET_TABLE} WHERE name = ?",
                          (FEED_CURSOR_SECRET,))  # fmt: skip
            row = cur.fetchone()
        if row is None:
            raise StoreNotReady("the store has no feed cursor secret: run `session-ledger migrate`")
        return str(row[0])

    def ping(self) -> None:
        with self.connections.transaction() as cur:
            self.connections.execute(cur, f"SELECT 1 FROM {TABLE} LIMIT 1")

    def insert(self, record: KeyRecord, only_if_empty: bool) -> bool:
        insert = f"INSERT INTO {TABLE} ({COLUMNS}) SELECT ?, ?, ?, ?, ?, ?, NULL"
        if only_if_empty:
            insert += f" WHERE NOT EXISTS (SELECT 1 FROM {TABLE})"
        with self.connections.transaction(writes=True, serial=only_if_empty) as cur:
            self.connections.execute(cur, insert, _params(record))
            return bool(cur.rowcount == 1)

    def by_hash(self, key_hash: str) -> KeyRecord | None:
        with self.connections.transaction() as cur:
            self.connections.execute(cur, BY_HASH, (key_hash,))
            row = cur.fetchone()
        return _row(row) if row else None

    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        query = f"SELECT {COLUMNS} FROM {TABLE}"
        params: tuple[str, ...] = ()
        if tenant is not None:
            query, params = query + " WHERE tenant = ?", (tenant,)
        with self.connections.transaction() as cur:
            self.connections.execute(cur, query + " ORDER BY created_at, id", params)
            return [_row(row) for row in cur.fetchall()]

    def set_revoked(self, key_id: str, tenant: str | None, when: datetime) -> bool:
        update = f"UPDATE {TABLE} SET revoked_at = COALESCE(revoked_at, ?) WHERE id = ?"
        params: tuple[str, ...] = (when.isoformat(), key_id)
        if tenant is not None:
            update, params = update + " AND tenant = ?", (*params, tenant)
        conns = self.connections
        with conns.transaction(writes=True) as cur:
            conns.execute(cur, update, params)
            if cur.rowcount != 1:
                return False
            conns.execute(cur, f"UPDATE {VERSION_TABLE} SET version = version + 1 WHERE id = 1")
            self._revoked(cur)
            return True

    def _revoked(self, cur: Any) -> None:
        """Inside the revoke's transaction: tell other processes, where the store can."""


class SQLiteKeyTable(SQLKeyTable):
    """Keys in the ledger's SQLite file; a process reads the table's version from its
    one-row table (a primary-key read, about as cheap as a dict lookup on a local file)."""

    connections: SQLiteTableConnections

    def __init__(self, connections: SQLiteTableConnections) -> None:
        super().__init__(connections)

    def version(self) -> Hashable:
        # One statement, no BEGIN/COMMIT around it: a read of one row by its key.
        row = self.connections.read_one(READ_VERSION)
        return row[0] if row else None

    def lookup(self, key_hash: str, version: Hashable) -> tuple[KeyRecord | None, Hashable]:
        # One read transaction: the key as of the version read with it.
        with self.connections.transaction() as cur:
            cur.execute(READ_VERSION)
            row = cur.fetchone()
            cur.execute(BY_HASH, (key_hash,))
            found = cur.fetchone()
        return (_row(found) if found else None), (row[0] if row else None)


class PostgresKeyTable(SQLKeyTable):
    """Keys in PostgreSQL; a process learns the table's version from a connection
    LISTENing for the revokes' NOTIFY (`notices`), so no request waits for a round trip."""

    def __init__(self, connections: TableConnections, notices: Notices) -> None:
        super().__init__(connections)
        self.notices = notices
        notices.start()

    def close(self) -> None:
        self.notices.close()
        super().close()

    def version(self) -> Hashable:
        return self.notices.version

    def _revoked(self, cur: Any) -> None:
        self.connections.execute(cur, f"NOTIFY {NOTIFY_CHANNEL}")
