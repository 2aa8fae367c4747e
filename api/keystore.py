"""What an API key is: a secret that names a tenant and a role. Its rows (and beside them
the store's own secret that seals the tenant tail's cursors, feed_cursors.py) live in
the store the ledger's URL names (`projections/api_key_table.py`, picked by
`bootstrap.open_key_store`).

A key's secret is never stored: only sha256 of it (the secrets are 256-bit random, so a
fast hash is enough; a user-chosen bootstrap key must be long for the same reason).
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from collections.abc import Hashable
from datetime import UTC, datetime

from session_ledger.domain.errors import InvalidInput
from session_ledger.projections.api_key_table import KeyRecord, KeyTable, MemoryKeyTable

from .key_cache import KeyCache

ROLES = ("agent", "auditor", "admin")
MIN_SECRET_CHARS = 24
CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")  # the ledger refuses these in tenant names
_DUMMY_HASH = hashlib.sha256(b"no key has this hash").hexdigest()


class KeyNotFound(LookupError):
    """No API key has this id in this tenant."""


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


class KeyStore:
    """API keys -> (tenant, role), kept in `table`.

    Active keys are cached in the process for as long as the key table's version stays
    the one they were read at (key_cache.py); a revoke moves it."""

    def __init__(self, table: KeyTable) -> None:
        self.table = table
        self.cache: KeyCache[KeyRecord] = KeyCache()

    def migrate(self) -> None:
        """Make the tables (safe when processes race)."""
        self.table.migrate()

    def ping(self) -> None:
        """Raise StoreNotReady unless the key table can be read."""
        self.table.ping()

    def feed_cursor_secret(self) -> str:
        """The store's secret for the tenant tail's cursors (made once by `migrate`)."""
        return self.table.feed_cursor_secret()

    def list(self, tenant: str | None = None) -> list[KeyRecord]:
        """Every key (of one tenant), oldest first, revoked ones included."""
        return self.table.list(tenant)

    def close(self) -> None:
        """Release connections."""
        self.table.close()

    def create(
        self, tenant: str, role: str, name: str = "", secret: str | None = None
    ) -> tuple[KeyRecord, str]:
        """A new active key; returns its record and its secret (shown to the caller once)."""
        record, secret = self._new(tenant, role, name, secret)
        self.table.insert(record, only_if_empty=False)
        return record, secret

    def ensure_admin(self, tenant: str, secret: str | None = None) -> str | None:
        """On a store with no keys at all, create an admin key; return its secret, else None."""
        record, secret = self._new(tenant, "admin", "bootstrap", secret)
        return secret if self.table.insert(record, only_if_empty=True) else None

    def cached(self, secret: str) -> KeyRecord | None:
        """The active key whose secret this is, if the process holds it, else None (then
        ask `authenticate`). On PostgreSQL and in memory this does no I/O; on SQLite it
        reads the key table's version."""
        return self.cache.get(self.table.version(), hash_secret(secret))

    def version(self) -> Hashable:
        """The key table's version as this process knows it (moved by every revoke; None:
        not known, e.g. PostgreSQL not listening). Blocks on SQLite (one row read)."""
        return self.table.version()

    def authenticate(self, secret: str) -> KeyRecord | None:
        """The active key whose secret this is, or None."""
        key_hash = hash_secret(secret)
        version = self.table.version()
        record = self.cache.get(version, key_hash)
        if record is None:
            record, version = self.table.lookup(key_hash, version)
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
        revoked = self.table.set_revoked(key_id, tenant, datetime.now(UTC))
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
        super().__init__(MemoryKeyTable())
