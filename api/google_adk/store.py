"""Where an ADK session service keeps its sessions: an in-process `Ledger` or a server.

Both answer the same five calls with plain data (message dicts in the ledger's JSON
shape) and raise the domain's errors, so the service above holds all the behaviour once.
The calls block; the service runs each of its operations in a worker thread.
"""

from __future__ import annotations

import os
from typing import Any, NamedTuple, Protocol

from session_ledger.domain.errors import InvalidInput, SessionNotFound
from session_ledger.domain.inputs import parse_messages
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.ports import CREATED_ORDER

from ..client import LedgerAPIError, LedgerClient

CLEARED = "HistoryCleared"
KEYS_PAGE = 1000


class Head(NamedTuple):
    """What the service needs of a ledger session's head."""

    version: int
    message_count: int
    cleared: bool  # its latest event cleared it: the ADK session was deleted
    replayed: bool = False  # (a write's answer) stored before, under its idempotency key


class Store(Protocol):
    """The ledger calls an ADK session service makes."""

    reads_versions: bool  # `messages` answers the version it read (else -1)

    def head(self, key: str) -> Head | None: ...
    # Messages [offset, offset + limit) of the active history (at `as_of_version`), and
    # the version read.
    def messages(
        self, key: str, offset: int, limit: int | None, as_of_version: int | None = None
    ) -> tuple[list[dict], int]: ...
    # The newest `n` messages of the active history at `head` but the newest `skip` of
    # them (already read); None if it moved since.
    def newest(self, key: str, head: Head, n: int, skip: int = 0) -> list[dict] | None: ...
    # `idempotency_key`: a write stored under it before answers as then (`replayed`)
    def append(
        self, key: str, messages: list[dict], expected_version: int | None,
        idempotency_key: str | None = None,
    ) -> Head: ...  # fmt: skip
    # Refuse what a write of `messages` would refuse for what they hold, writing nothing.
    def check(self, messages: list[dict]) -> None: ...
    def replace(self, key: str, messages: list[dict], expected_version: int | None) -> Head: ...
    def clear(self, key: str, expected_version: int | None) -> None: ...
    def keys(self, prefix: str) -> list[str]: ...  # not cleared, in the order made


class LocalStore:
    """A `Ledger` in this process; writes carry `tenant` and `actor`."""

    reads_versions = True

    def __init__(self, ledger: Ledger, *, tenant: str | None, actor: str | None) -> None:
        self.ledger, self.tenant = ledger, tenant
        self.write: dict[str, Any] = {"tenant": tenant, "actor": actor}

    def head(self, key: str) -> Head | None:
        try:
            h = self.ledger.head(key, tenant=self.tenant)
        except SessionNotFound:
            return None
        return Head(h.version, h.message_count, h.last_event == CLEARED)

    def messages(
        self, key: str, offset: int, limit: int | None, as_of_version: int | None = None
    ) -> tuple[list[dict], int]:
        found = self.ledger.history(
            key, tenant=self.tenant, offset=offset, limit=limit, as_of_version=as_of_version
        )
        return found.dicts(), found.version  # (no message objects made)

    def newest(self, key: str, head: Head, n: int, skip: int = 0) -> list[dict] | None:
        # One read of `n` rows, whatever the session's length, of which the oldest
        # `n - skip` are decoded; its version says whether it is `head`'s.
        found = self.ledger.history(key, tenant=self.tenant, last=n, limit=n - skip)
        return found.dicts() if found.version == head.version else None

    def append(
        self, key: str, messages: list[dict], expected_version: int | None,
        idempotency_key: str | None = None,
    ) -> Head:  # fmt: skip
        done = self.ledger.put_messages(
            key, messages, expected_version=expected_version, idempotency_key=idempotency_key,
            **self.write,
        )  # fmt: skip
        return Head(done.version, done.message_count, False, done.replayed)

    def check(self, messages: list[dict]) -> None:
        """Their JSON and their size, against this ledger's limits."""
        parse_messages(messages, self.ledger.limits, allow_empty=False)

    def replace(self, key: str, messages: list[dict], expected_version: int | None) -> Head:
        done = self.ledger.set(key, messages, expected_version=expected_version, **self.write)
        return Head(done.version, done.message_count, False)

    def clear(self, key: str, expected_version: int | None) -> None:
        self.ledger.reset(key, expected_version=expected_version, **self.write)

    def keys(self, prefix: str) -> list[str]:
        found: list[str] = []
        after = None
        while True:
            page = self.ledger.keys(
                tenant=self.tenant, prefix=prefix, after=after, limit=KEYS_PAGE,
                exclude_cleared=True, order=CREATED_ORDER,
            )  # fmt: skip
            found += page
            if len(page) < KEYS_PAGE:
                return found
            after = page[-1]


class RemoteStore:
    """A session-ledger server; the API key decides the tenant and is the actor."""

    reads_versions = False

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self.client = LedgerClient(base_url, api_key, timeout=timeout)

    def close(self) -> None:
        """Close the connections to the server."""
        self.client.close()

    def head(self, key: str) -> Head | None:
        try:
            h = self.client.head(key)
        except LedgerAPIError as e:
            if e.code == "session_not_found":
                return None
            raise e.domain_error(key) from e
        return Head(h.version, h.message_count, h.last_event == CLEARED)

    def messages(
        self, key: str, offset: int, limit: int | None, as_of_version: int | None = None
    ) -> tuple[list[dict], int]:
        try:
            found = self.client.get_all(
                key, offset=offset, limit=limit, as_of_version=as_of_version
            )
        except LedgerAPIError as e:
            if e.code == "session_not_found":
                return [], 0  # (as the Ledger reads a session it does not have)
            raise e.domain_error(key) from e
        return [m.to_dict() for m in found], -1  # (the API's pages are of one version)

    def newest(self, key: str, head: Head, n: int, skip: int = 0) -> list[dict] | None:
        # From the position `head` puts them at (the API's answer names no version to
        # compare). Without `skip`, a session that grew since answers more than `n`; with
        # it, appends since leave those positions as they were, and a cleared session
        # answers fewer.
        found, _ = self.messages(key, head.message_count - n, n - skip if skip else None)
        return found if len(found) == n - skip else None

    def append(
        self, key: str, messages: list[dict], expected_version: int | None,
        idempotency_key: str | None = None,
    ) -> Head:  # fmt: skip
        options = _if_match(expected_version)
        if idempotency_key is not None:
            options["idempotency_key"] = idempotency_key
        try:
            done = self.client.put_messages(key, messages, **options)
        except LedgerAPIError as e:
            raise e.domain_error(key, expected_version) from e
        return Head(done.version, done.message_count, False, done.replayed)

    def check(self, messages: list[dict]) -> None:
        """Their JSON; their size is the server's to judge, by limits of its own."""
        for message in messages:
            ChatMessage.parse(message)

    def replace(self, key: str, messages: list[dict], expected_version: int | None) -> Head:
        try:
            done = self.client.set(key, messages, **_if_match(expected_version))
        except LedgerAPIError as e:
            raise e.domain_error(key, expected_version) from e
        return Head(done.version, done.message_count, False)

    def clear(self, key: str, expected_version: int | None) -> None:
        try:
            self.client.reset(key, **_if_match(expected_version))
        except LedgerAPIError as e:
            raise e.domain_error(key, expected_version) from e

    def keys(self, prefix: str) -> list[str]:
        found: list[str] = []
        cursor = None
        while True:
            try:
                page = self.client.keys(
                    prefix=prefix, cursor=cursor, limit=KEYS_PAGE, exclude_cleared=True,
                    order=CREATED_ORDER,
                )  # fmt: skip
            except LedgerAPIError as e:
                raise e.domain_error(prefix) from e
            found += page.keys
            if page.next_cursor is None:
                return found
            cursor = page.next_cursor


def _if_match(expected_version: int | None) -> dict[str, Any]:
    if expected_version is None:
        return {}
    if expected_version == 0:
        return {"if_none_match": True}  # the session must not exist yet
    return {"if_match": expected_version}


API_KEY_ENV = "LEDGER_API_KEY"  # the server's API key, when none is passed in


def open_store(
    ledger: Ledger | None, url: str | None, api_key: str | None, tenant: str | None,
    actor: str | None,
) -> Store:  # fmt: skip
    """The store named by `ledger` (in process) or `url` (a server's http(s):// URL, or a
    database URL opened in this process, one Ledger per URL)."""
    if (ledger is None) == (url is None):
        raise InvalidInput("give either ledger= (an in-process Ledger) or url=")
    if ledger is not None:
        return LocalStore(ledger, tenant=tenant, actor=actor)
    assert url is not None
    if url.startswith(("http://", "https://")):
        key = api_key or os.environ.get(API_KEY_ENV)
        if not key:
            raise InvalidInput(f"a server URL needs api_key= or {API_KEY_ENV}")
        if tenant is not None or actor is not None:
            raise InvalidInput("over HTTP the API key decides the tenant and the actor")
        return RemoteStore(url, key)
    from ..bootstrap import shared_ledger  # the composition root picks the store

    return LocalStore(shared_ledger(url), tenant=tenant, actor=actor)
