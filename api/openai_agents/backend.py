"""Where a `LedgerSession`'s items live: an in-process `Ledger` or a server over HTTP.

Both answer the session's four calls with its items and block; the session runs them
in a worker thread, as `SQLiteSession` does.
"""

from __future__ import annotations

import contextlib
import os
from typing import Any, Protocol

from session_ledger.domain.errors import InvalidInput, MessageNotFound, SessionNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage

from ..client import LedgerClient
from ..client_requests import LedgerAPIError
from .items import check, from_chat_message, from_message

API_KEY_ENV = "LEDGER_API_KEY"  # the server's API key, when none is passed in
_EMPTY = frozenset({"session_not_found", "message_not_found"})  # a pop of nothing


class Items(Protocol):
    """A session's items, stored as ledger messages, oldest first."""

    def add(self, key: str, messages: list[dict[str, Any]]) -> None: ...
    # The newest `limit` (None: all), in order; [] for a session never written.
    def read(self, key: str, limit: int | None) -> list[Any]: ...
    def pop(self, key: str) -> Any | None: ...
    def clear(self, key: str) -> None: ...
    def close(self) -> None: ...


class LocalItems:
    """A `Ledger` in this process; writes carry `tenant` and `actor`."""

    def __init__(self, ledger: Ledger, *, tenant: str | None, actor: str | None) -> None:
        self.ledger, self.tenant = ledger, tenant
        self.write = {"tenant": tenant, "actor": actor}
        # Each session's (version, message count) as this object last wrote or read it:
        # the newest items are then one read, checked to be of that version.
        self._known: dict[str, tuple[int, int]] = {}

    def add(self, key: str, messages: list[dict[str, Any]]) -> None:
        done = self.ledger.put_messages(key, messages, **self.write)
        self._known[key] = (done.version, done.message_count)

    def read(self, key: str, limit: int | None) -> list[Any]:
        ledger, tenant = self.ledger, self.tenant
        if limit is None:
            return _items(ledger.history(key, tenant=tenant).messages())
        known = self._known.get(key)
        while True:  # the newest `limit` of one version: read again if a write came between
            if known is None:
                try:
                    head = ledger.head(key, tenant=tenant)
                except SessionNotFound:
                    return []
                known = (head.version, head.message_count)
            version, count = known
            found = ledger.history(key, tenant=tenant, offset=max(0, count - limit), limit=limit)
            if found.version == version:
                self._known[key] = known
                return _items(found.messages())
            known = None

    def pop(self, key: str) -> Any | None:
        try:
            done = self.ledger.delete_last_message(key, **self.write)
        except (SessionNotFound, MessageNotFound):
            return None
        self._known[key] = (done.version, done.message_count)
        return from_chat_message(done.removed[0])

    def clear(self, key: str) -> None:
        with contextlib.suppress(SessionNotFound):  # a session never written holds none
            done = self.ledger.reset(key, **self.write)
            self._known[key] = (done.version, done.message_count)

    def close(self) -> None:
        """The ledger is the caller's: it stays open."""


class RemoteItems:
    """A session-ledger server; the API key decides the tenant and is the actor."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self.client = LedgerClient(base_url, api_key, timeout=timeout)

    def add(self, key: str, messages: list[dict[str, Any]]) -> None:
        self.client.put_messages(key, check(messages))

    def read(self, key: str, limit: int | None) -> list[Any]:
        try:
            if limit is None:
                return _items(self.client.get_all(key))
            head = self.client.head(key)
            offset = max(0, head.message_count - limit)
            found = self.client.get_all(
                key, offset=offset, limit=limit, as_of_version=head.version
            )  # (one version: the count the offset was taken from)
        except LedgerAPIError as e:
            if e.code == "session_not_found":
                return []
            raise
        return _items(found)

    def pop(self, key: str) -> Any | None:
        try:
            done = self.client.delete_last_message(key)
        except LedgerAPIError as e:
            if e.code in _EMPTY:
                return None
            raise
        return from_message(done.removed[0].model_dump())

    def clear(self, key: str) -> None:
        try:
            self.client.reset(key)
        except LedgerAPIError as e:
            if e.code != "session_not_found":
                raise

    def close(self) -> None:
        self.client.close()


def _items(messages: list[ChatMessage]) -> list[Any]:
    return [from_chat_message(m) for m in messages]


def open_items(
    *, ledger: Ledger | None, url: str | None, api_key: str | None, tenant: str | None,
    actor: str | None,
) -> Items:  # fmt: skip
    """The items named by `ledger` (in process) or `url` (a server's http(s):// URL, or a
    database URL opened in this process, one Ledger per URL)."""
    if ledger is not None:
        if url is not None:
            raise InvalidInput("give ledger= or url=, not both")
        return LocalItems(ledger, tenant=tenant, actor=actor)
    if url is None:
        raise InvalidInput(
            "say where the session lives: ledger=<Ledger>, url='http(s)://server' or "
            "url='sqlite:///path/ledger.db' / 'postgresql://...'"
        )
    if url.startswith(("http://", "https://")):
        if tenant is not None or actor is not None:
            raise InvalidInput("over HTTP the API key names the tenant and the actor")
        api_key = api_key or os.environ.get(API_KEY_ENV)
        if not api_key:
            raise InvalidInput(f"no API key for {url}: pass api_key= or set {API_KEY_ENV}")
        return RemoteItems(url, api_key)
    from ..bootstrap import shared_ledger  # the composition root picks the store

    return LocalItems(shared_ledger(url), tenant=tenant, actor=actor)
