"""The tenant tail's positions as opaque cursors, so that a tenant learns nothing of the
other tenants' writes from them.

The feed's positions (`projections/feed.py`) count every tenant's events: SQLite's rowid,
PostgreSQL's (transaction id, event id). Sent as they are, the gap between two of a
tenant's positions is the number of other tenants' writes in between. So the tail sends
each position sealed (AES-GCM, a fresh nonce each time, the tenant as associated data):
the same position never looks the same twice, and a cursor is good only for the tenant
it was sent to. Opening it gives the position back exactly, so a resume is exactly where
the tail was (no gap, no duplicate).

Every server of a store must seal with the same key (a cursor sent by one is resumed at
another). It derives from `feed_cursor_key` when set (several stores behind one cursor
space, a rotation by hand); unset, from a random secret the store keeps beside the API
keys, made by the first `migrate` (keystore_sql.py), so nothing an operator configures,
a database URL least of all, tells it. The server reads that secret on the first tenant
tail, not at start: a store not ready yet answers 503 there, as everywhere else.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import hashlib
import os
import struct
from collections.abc import Callable

from cryptography.exceptions import InvalidTag
from cryptography.hazmat.primitives.ciphers.aead import AESGCM

from session_ledger.domain.errors import InvalidInput

NONCE_BYTES = 12
MAX_CURSOR_CHARS = 128  # a cursor is 48 (SQLite) or 59 (PostgreSQL) characters
KEY_LABEL = b"session-ledger feed cursor\x00"


class FeedCursors:
    """Seals feed positions into cursors for one tenant, and opens them."""

    def __init__(self, secret: str) -> None:
        key = hashlib.sha256(KEY_LABEL + secret.encode("utf-8", "surrogatepass")).digest()
        self._aead = AESGCM(key)

    def seal(self, tenant: str, position: str) -> str:
        """The cursor of `position` (a feed position: integers joined by dots)."""
        numbers = [int(part) for part in position.split(".")]
        plain = struct.pack(f">{len(numbers)}Q", *numbers)
        nonce = os.urandom(NONCE_BYTES)
        sealed = nonce + self._aead.encrypt(nonce, plain, _tenant(tenant))
        return base64.urlsafe_b64encode(sealed).rstrip(b"=").decode("ascii")

    def open(self, tenant: str, cursor: str) -> str:
        """The position a cursor of `tenant` holds; InvalidInput for anything else (a
        cursor of another tenant or server key, a position as sent before cursors)."""
        refused = InvalidInput(
            f"not a position of this tenant's feed: {cursor[:MAX_CURSOR_CHARS]!r} (send an "
            "id: this feed sent, or reopen the tail without one)"
        )
        if len(cursor) > MAX_CURSOR_CHARS or not cursor.isascii():
            raise refused
        try:
            sealed = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
            plain = self._aead.decrypt(sealed[:NONCE_BYTES], sealed[NONCE_BYTES:], _tenant(tenant))
        except (binascii.Error, ValueError, InvalidTag):
            raise refused from None
        if not plain or len(plain) % 8:
            raise refused
        return ".".join(str(n) for n in struct.unpack(f">{len(plain) // 8}Q", plain))


class ServerFeedCursors:
    """The server's FeedCursors: of `key` when given, else of the store's secret, which
    `stored_secret` reads (blocking) the first time they are asked for."""

    def __init__(self, key: str | None, stored_secret: Callable[[], str]) -> None:
        self._cursors = None if key is None else FeedCursors(key)
        self._stored_secret = stored_secret

    async def get(self) -> FeedCursors:
        if self._cursors is None:
            # Two first tails may both read it: the same secret, the same cursors.
            self._cursors = FeedCursors(await asyncio.to_thread(self._stored_secret))
        return self._cursors


def _tenant(tenant: str) -> bytes:
    return tenant.encode("utf-8", "surrogatepass")
