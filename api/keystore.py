"""Where API keys live: one table beside the ledger's, in the store its URL names; and
beside them the store's own secret that seals the tenant tail's cursors (feed_cursors.py).

A key's secret is never stored: only sha256 of it (the secrets are 256-bit random, so a
fast hash is enough; a user-chosen bootstrap key must be long for the same reason).
Backends: in-memory (`memory://`), SQLite (`sqlite:///path`), PostgreSQL.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import threading
from abc import ABC, abstractmethod
from collections.abc import Hashable
from dataclasses import dataclass
from datetime import UTC, datetime

from session_ledger.domain.errors import InvalidInput

from .key_cache import KeyCache

ROLES = ("agent", "auditor", "admin")
MIN_SECRET_CHARS = 24
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # the ledger refuses these in tenant names
_DUMMY_HASH = hashlib.sha256(b"no key has this hash").hexdigest()


class KeyNotFound(LookupError):
    """No API key has this id in this tenant."""


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


def hash_secret(secret: str) -> str:
    return hashlib.sha256(secret.encode("utf-8", "surrogatepass")).hexdigest()


def new_secret() -> str:
    """A fresh API key: 256 random bits; the prefix makes leaked keys easy to grep for."""
    return "sl_" + secrets.token_urlsafe(32)


def check_key_fields(tenant: str, role: str, name: str) -> None:
    if role not in ROLES:
        raise InvalidInput(f"role must be one of {', '.join(ROLES)}; got {role!r}")
    if not tenant or len(tenant) > 128 or CONTROL.search(tenant):
        raise InvalidInput("tenant must be 1 to 128 characters, no control characters")
    if len(name) > 200 or CONTROL.search(name):
        raise InvalidInput("name must be at most 200 characters, no control characters")


class KeyStore(ABC):
    """API keys -> (tenant, role). Tables come from `migrate()`, safe when processes race.

    Active keys are cached in the process for as long as the key table's version stays
    the one they were read at (key_cache.py); a revoke moves it."""

    def __init__(self) -> None:
        self.cache: KeyCache[KeyRecord] = KeyCache()

    @abstractmethod
    def migrate(self) -> None: ...

    @abstractmethod
    def _insert(self, record: KeyRecord, only_if_empty: bool) -> bool:
        """Store `record`; with `only_if_empty`, only when the table holds no key (atomic)."""

    @abstractmethod
    def _by_hash(self, key_hash: str) -> KeyRecord | None: ...

    @abstractmethod
    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        """Every key (of one tenant), oldest first, revoked ones included."""

    @abstractmethod
    def _set_revoked(self, key_id: str, tenant: str | None, when: datetime) -> bool: ...

    @abstractmethod
    def _version(self) -> Hashable:
        """The key table's version as this process knows it now; None: trust no cached key."""

    def _lookup(self, key_hash: str, version: Hashable) -> tuple[KeyRecord | None, Hashable]:
        """The key with this hash and the version it was read at (backends that can read
        both in one transaction say so)."""
        return self._by_hash(key_hash), version

    @abstractmethod
    def ping(self) -> None:
        """Raise StoreNotReady unless the key table can be read."""

    @abstractmethod
    def feed_cursor_secret(self) -> str:
        """The store's secret for the tenant tail's cursors: 32 random bytes (hex), made
        once per store by `migrate`, so every process of the store reads the same."""

    def close(self) -> None:  # noqa: B027 - only the pooled backend holds connections
        """Release connections."""

    def create(
        self, tenant: str, role: str, name: str = "", secret: str | None = None
    ) -> tuple[KeyRecord, str]:
        """A new active key; returns its record and its secret (shown to the caller once)."""
        record, secret = self._new(tenant, role, name, secret)
        self._insert(record, only_if_empty=False)
        return record, secret

    def ensure_admin(self, tenant: str, secret: str | None = None) -> str | None:
        """On a store with no keys at all, create an admin key; return its secret, else None."""
        record, secret = self._new(tenant, "admin", "bootstrap", secret)
        return secret if self._insert(record, only_if_empty=True) else None

    def cached(self, secret: str) -> KeyRecord | None:
        """The active key whose secret this is, if the process holds it, else None (then
        ask `authenticate`). On PostgreSQL and in memory this does no I/O; on SQLite it
        reads the key table's version."""
        return self.cache.get(self._version(), hash_secret(secret))

    def version(self) -> Hashable:
        """The key table's version as this process knows it (moved by every revoke; None:
        not known, e.g. PostgreSQL not listening). Blocks on SQLite (one row read)."""
        return self._version()

    def authenticate(self, secret: str) -> KeyRecord | None:
        """The active key whose secret this is, or None."""
        key_hash = hash_secret(secret)
        version = self._version()
        record = self.cache.get(version, key_hash)
        if record is None:
            record, version = self._lookup(key_hash, version)
            if record is not None:
                self.cache.put(version, record)
        # The lookup is by hash; the final comparison is constant-time all the same.
        stored = record.key_hash if record is not None else _DUMMY_HASH
        if not hmac.compare_digest(stored, key_hash) or record is None:
            return None
        return None if record.revoked_at is not None else record

    def revoke(self, key_id: str, tenant: str | None = None) -> KeyRecord:
        """Revoke a key (of `tenant`, when given); revoking twice keeps the first time."""
        if "\x00" in key_id:  # no key has one, and PostgreSQL's text refuses it
            raise KeyNotFound(f"API key {key_id!r} not found")
        revoked = self._set_revoked(key_id, tenant, datetime.now(UTC))
        self.cache.clear()  # other processes see the version move; this one need not wait
        if not revoked:
            raise KeyNotFound(f"API key {key_id!r} not found")
        return next(r for r in self.list(tenant) if r.id == key_id)

    @staticmethod
    def _new(tenant: str, role: str, name: str, secret: str | None) -> tuple[KeyRecord, str]:
        check_key_fields(tenant, role, name)
        if secret is None:
            secret = new_secret()
        elif len(secret) < MIN_SECRET_CHARS or not secret.isprintable() or not secret.isascii():
            raise InvalidInput(
                f"an API key must be at least {MIN_SECRET_CHARS} printable ASCII characters"
            )
        record = KeyRecord(
            id=secrets.token_hex(8), tenant=tenant, role=role, name=name,
            key_hash=hash_secret(secret), created_at=datetime.now(UTC),
        )  # fmt: skip
        return record, secret


class MemoryKeyStore(KeyStore):
    """Keys in a dict: for `memory://` ledgers and unit tests."""

    def __init__(self) -> None:
        super().__init__()
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

    def _version(self) -> Hashable:
        return self._revocations

    def _insert(self, record: KeyRecord, only_if_empty: bool) -> bool:
        with self._lock:
            if only_if_empty and self._keys:
                return False
            self._keys[record.id] = record
            return True

    def _by_hash(self, key_hash: str) -> KeyRecord | None:
        with self._lock:
            return next((r for r in self._keys.values() if r.key_hash == key_hash), None)

    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        with self._lock:
            records = [r for r in self._keys.values() if tenant in (None, r.tenant)]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def _set_revoked(self, key_id: str, tenant: str | None, when: datetime) -> bool:
        with self._lock:
            record = self._keys.get(key_id)
            if record is None or tenant not in (None, record.tenant):
                return False
            if record.revoked_at is None:
                self._keys[key_id] = KeyRecord(**{**record.__dict__, "revoked_at": when})
                self._revocations += 1
            return True


def open_key_store(
    database_url: str, *, pool_size: int = 4, lock_timeout: float = 30, connect_wait: float = 30
) -> KeyStore:
    """The key store for the same URL the ledger uses, with at most `pool_size`
    connections; on PostgreSQL a request waits at most `connect_wait` seconds for
    a connection."""
    if database_url.startswith("memory://"):
        return MemoryKeyStore()
    if database_url.startswith("sqlite://"):
        from .keystore_sql import SQLiteKeyStore

        return SQLiteKeyStore(database_url, lock_timeout=lock_timeout, pool_size=pool_size)
    if database_url.startswith(("postgresql://", "postgres://")):
        from .keystore_sql import PostgresKeyStore

        return PostgresKeyStore(database_url, pool_size=pool_size, connect_wait=connect_wait)
    raise InvalidInput(f"unsupported database URL {database_url.split(':', 1)[0]!r}")
