"""API keys held in the process, so a request authenticates without a SQL lookup.

A cached key is good while the key table's *version* is the one it was read at: a revoke
moves the version in the same transaction, and every process then drops its cached keys
before its next request. How a process learns the version is the store's: SQLite reads
its one-row version table (a primary-key read, about as cheap as a dict lookup on a
local file), PostgreSQL keeps a connection LISTENing for the revoke's NOTIFY
(`projections/api_key_table.py`), so no request waits for a round trip. Only active keys
are cached; an unknown or revoked secret is looked up every time. Open live tails,
authenticated once when they opened, follow the same version (`live_tails.py`) and end
with their key.
"""

from __future__ import annotations

from collections.abc import Hashable
from datetime import datetime
from typing import Generic, Protocol, TypeVar

MAX_CACHED_KEYS = 10_000  # more keys than this in one process: the rest are looked up


class CachedKey(Protocol):
    """What the cache reads of a key (keystore.py's KeyRecord)."""

    @property
    def key_hash(self) -> str: ...

    @property
    def revoked_at(self) -> datetime | None: ...


Key = TypeVar("Key", bound=CachedKey)


class KeyCache(Generic[Key]):
    """Active keys by the hash of their secret, valid for one version of the key table."""

    def __init__(self, max_keys: int = MAX_CACHED_KEYS) -> None:
        self.max_keys = max_keys
        # One tuple, replaced whole: a reader never sees a version with another's keys.
        self._held: tuple[Hashable, dict[str, Key]] = (None, {})

    def get(self, version: Hashable, key_hash: str) -> Key | None:
        """The cached key, if the table is still at the version it was read at."""
        if version is None:
            return None
        held_version, keys = self._held
        if held_version != version:
            self._held = (version, {})
            return None
        return keys.get(key_hash)

    def put(self, version: Hashable, record: Key) -> None:
        """Keep `record`, read while the table was at `version` (dropped if it moved)."""
        held_version, keys = self._held
        if version is None or version != held_version or record.revoked_at is not None:
            return
        if len(keys) < self.max_keys:
            keys[record.key_hash] = record

    def clear(self) -> None:
        self._held = (None, {})
