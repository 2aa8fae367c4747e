"""API keys held in the process, so a request authenticates without a SQL lookup.

A cached key is good while the key table's *version* is the one it was read at: a revoke
moves the version in the same transaction, and every process then drops its cached keys
before its next request. How a process learns the version is the store's: SQLite reads
its one-row version table (a primary-key read, about as cheap as a dict lookup on a
local file), PostgreSQL keeps a connection LISTENing for the revoke's NOTIFY
(`KeyNotices`), so no request waits for a round trip. Only active keys are cached; an
unknown or revoked secret is looked up every time. Open live tails, authenticated once
when they opened, follow the same version (`live_tails.py`) and end with their key.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Hashable
from datetime import datetime
from typing import Generic, Protocol, TypeVar

MAX_CACHED_KEYS = 10_000  # more keys than this in one process: the rest are looked up
NOTIFY_CHANNEL = "ledger_api_keys"
RECONNECT_SECONDS = 1.0
POLL_SECONDS = 0.25  # how soon the listener sees close()

log = logging.getLogger(__name__)


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


class KeyNotices:
    """The version of PostgreSQL's key table as this process knows it: a counter moved by
    every NOTIFY of a revoke (and by every reconnection, which may have missed some).
    None while not listening: then no cached key is trusted."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url
        self._version: int | None = None
        self._moves = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._listen, name="key-notices", daemon=True)

    @property
    def version(self) -> int | None:
        return self._version

    def start(self) -> None:
        """Start listening (until the first LISTEN, keys are looked up)."""
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=5)

    def _moved(self, listening: bool) -> None:
        self._moves += 1
        self._version = self._moves if listening else None

    def _listen(self) -> None:
        import psycopg

        while not self._stop.is_set():
            try:
                with psycopg.connect(self.database_url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {NOTIFY_CHANNEL}")
                    self._moved(listening=True)
                    while not self._stop.is_set():
                        for _ in conn.notifies(timeout=POLL_SECONDS, stop_after=1):
                            self._moved(listening=True)
            except psycopg.Error as exc:
                if not self._stop.is_set():
                    log.warning("API key notices: %s; keys are looked up until back", exc)
            finally:
                self._moved(listening=False)
            self._stop.wait(RECONNECT_SECONDS)
