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

    def add(self, key: str, messages: list[dict[str, Any]]) -> None:
        self.ledger.put_messages(key, messages, **self.write)

    def read(self, key: str, limit: int | None) -> list[Any]:
        # The newest `limit`: one read of as many rows, whatever the session's length,
        # each made an item as it is decoded.
        found = self.ledger.history(key, tenant=self.tenant, last=limit)
        return found.decoded(_text_item, from_message)

    def pop(self, key: str) -> Any | None:
        try:
            done = self.ledger.delete_last_message(key, **self.write)
        except (SessionNotFound, MessageNotFound):
            return None
        return from_chat_message(done.removed[0])

    def clear(self, key: str) -> None:
        with contextlib.suppress(SessionNotFound):  # a session never written holds none
            self.ledger.reset(key, **self.write)

    def close(self) -> None:
        """The ledger is the caller's: it stays open."""


class RemoteItems:
    """A session-ledger server; the API key decides the tenant and is the actor."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self.client = LedgerClient(base_url, api_key, timeout=timeout)

    def add(self, key: str, messages: list[dict[str, Any]]) -> None:
        self.client.put_messages(key, check(messages))

    def read(self, key: str, limit: int | None) -> list[Any]:
        try:  # (the newest `limit` in one request, when one page holds them)
            return _items(self.client.get_all(key, last=limit))
        except LedgerAPIError as e:
            if e.code == "session_not_found":
                return []
            raise

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


def _text_item(role: str, text: str) -> dict[str, str]:
    """The item of a message of one text block (what `from_chat_message` makes of it)."""
    return {"role": role, "content": text}


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
