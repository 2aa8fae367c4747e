"""Where the adapters' sessions live: an in-process `Ledger` or a server over HTTP.

Both backends answer the same few calls with plain data (message dicts in LlamaIndex's
JSON shape, `MemoryHead` tuples) and raise the domain's errors, so the adapters above hold
all the behaviour once. Every call has an async twin named with an `a` prefix.
"""

from __future__ import annotations

import asyncio
import os
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple, Protocol
from urllib.parse import urlsplit

from session_ledger.domain.errors import InvalidInput, SessionNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.ports import CREATED_ORDER
from session_ledger.domain.tokens import callers_tokenizer

from ..client import LedgerAPIError, LedgerClient
from ..client_async import AsyncLedgerClient
from ..schemas import Message
from .api_keys import KEYS, fingerprint

DATABASE_URL_ENV = "LEDGER_DATABASE_URL"  # supplies a local URL's password on restore
KEYS_PAGE = 1000
CLEARED = "HistoryCleared"


class MemoryHead(NamedTuple):
    """What the adapters need of a session's head."""

    version: int
    message_count: int
    archived_count: int
    cleared: bool  # the latest event cleared the session: LlamaIndex's "no such key"


class Backend(Protocol):
    """The calls the adapters make; `a`-prefixed twins are coroutines."""

    key_fingerprint: str | None  # a server's: which API key (api_keys.py); None in process

    def head(self, key: str) -> MemoryHead | None: ...
    def get(self, key: str, token_limit: int | None, initial_token_count: int) -> list[dict]: ...
    def get_all(self, key: str, status: str, offset: int, limit: int | None) -> list[dict]: ...
    # Keys not cleared, in the order their sessions were made (SimpleChatStore's order).
    def keys(self, after: str | None) -> tuple[list[str], str | None]: ...
    def put_messages(self, key: str, messages: list[dict]) -> None: ...
    def set(self, key: str, messages: list[dict], expected_version: int | None) -> None: ...
    def reset(self, key: str, expected_version: int | None) -> None: ...
    def delete_message(self, key: str, index: int, expected_version: int | None) -> dict: ...
    def archive_oldest(self, key: str, n: int, expected_version: int | None) -> None: ...


class LocalBackend:
    """A `Ledger` in this process; writes carry `tenant` and `actor`."""

    def __init__(
        self, ledger: Ledger, *, tenant: str | None = None, actor: str | None = None,
        tokenizer: Callable[[str], Any] | None = None,
    ) -> None:  # fmt: skip
        self.ledger, self.tenant = ledger, tenant
        self.key_fingerprint = None
        self.write = {"tenant": tenant, "actor": actor}
        self.tokenizer = callers_tokenizer(tokenizer) if tokenizer else None

    def head(self, key: str) -> MemoryHead | None:
        try:
            h = self.ledger.head(key, tenant=self.tenant)
        except SessionNotFound:
            return None
        return _head(h)

    def get(self, key: str, token_limit: int | None, initial_token_count: int) -> list[dict]:
        found = self.ledger.window(
            key, tenant=self.tenant, token_limit=token_limit,
            initial_token_count=initial_token_count, tokenizer=self.tokenizer,
        )  # fmt: skip
        return found.dicts()  # (no message objects made)

    def get_all(self, key: str, status: str, offset: int, limit: int | None) -> list[dict]:
        found = self.ledger.history(
            key, tenant=self.tenant, status=status, offset=offset, limit=limit
        )
        return found.dicts()

    def keys(self, after: str | None) -> tuple[list[str], str | None]:
        page = self.ledger.keys(
            tenant=self.tenant, after=after, limit=KEYS_PAGE, exclude_cleared=True,
            order=CREATED_ORDER,
        )  # fmt: skip
        return page, (page[-1] if len(page) == KEYS_PAGE else None)

    def put_messages(self, key: str, messages: list[dict]) -> None:
        self.ledger.put_messages(key, messages, **self.write)

    def set(self, key: str, messages: list[dict], expected_version: int | None) -> None:
        self.ledger.set(key, messages, expected_version=expected_version, **self.write)

    def reset(self, key: str, expected_version: int | None) -> None:
        self.ledger.reset(key, expected_version=expected_version, **self.write)

    def delete_message(self, key: str, index: int, expected_version: int | None) -> dict:
        done = self.ledger.delete_message(
            key, index, expected_version=expected_version, **self.write
        )
        return done.removed[0].to_dict()

    def archive_oldest(self, key: str, n: int, expected_version: int | None) -> None:
        self.ledger.archive_oldest(key, n, expected_version=expected_version, **self.write)

    def __getattr__(self, name: str) -> Callable[..., Any]:
        # The async twins: the Ledger's calls block on the database, so they run in a thread.
        if name.startswith("a") and name[1:] in _CALLS:
            method = getattr(self, name[1:])

            async def twin(*args: Any) -> Any:
                return await asyncio.to_thread(method, *args)

            return twin
        raise AttributeError(name)


class RemoteBackend:
    """A session-ledger server; the API key decides the tenant and is the actor."""

    def __init__(self, base_url: str, api_key: str, *, timeout: float = 30.0) -> None:
        self.base_url, self.timeout = base_url, timeout
        self._api_key = api_key
        self.key_fingerprint = fingerprint(api_key)
        self.client = LedgerClient(base_url, self._api_key, timeout=timeout)
        # httpx's async pool belongs to one event loop; sync wrappers may run several.
        self._async: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncLedgerClient]
        self._async = weakref.WeakKeyDictionary()

    def _aclient(self) -> AsyncLedgerClient:
        loop = asyncio.get_running_loop()
        client = self._async.get(loop)
        if client is None:
            client = AsyncLedgerClient(self.base_url, self._api_key, timeout=self.timeout)
            self._async[loop] = client
        return client

    def __getattr__(self, name: str) -> Callable[..., Any]:
        async_twin = name.startswith("a") and name[1:] in _CALLS
        request = _REMOTE.get(name[1:] if async_twin else name)
        if request is None:
            raise AttributeError(name)
        if async_twin:

            async def send_async(*args: Any) -> Any:
                method, cargs, kwargs, answer = request(*args)
                try:
                    found = await getattr(self._aclient(), method)(*cargs, **kwargs)
                except LedgerAPIError as e:
                    return _answer_error(method, e, args)
                return answer(found)

            return send_async

        def send(*args: Any) -> Any:
            method, cargs, kwargs, answer = request(*args)
            try:
                found = getattr(self.client, method)(*cargs, **kwargs)
            except LedgerAPIError as e:
                return _answer_error(method, e, args)
            return answer(found)

        return send


# Each backend call as a client call: (client method, args, kwargs, how to read the answer).
ClientCall = tuple[str, tuple[Any, ...], dict[str, Any], Callable[[Any], Any]]


def _if_match(expected_version: int | None) -> dict[str, Any]:
    return {} if expected_version is None else {"if_match": expected_version}


def _head(h: Any) -> MemoryHead:
    """A head from either the domain's or the API's SessionHeadAnswer."""
    return MemoryHead(h.version, h.message_count, h.archived_count, h.last_event == CLEARED)


def _nothing(_: Any) -> None:
    return None


_REMOTE: dict[str, Callable[..., ClientCall]] = {
    "head": lambda key: ("head", (key,), {}, _head),
    "get": lambda key, token_limit, initial: (
        "get", (key,), {"token_limit": token_limit, "initial_token_count": initial}, _wires
    ),
    "get_all": lambda key, status, offset, limit: (
        "get_all", (key,), {"status": status, "offset": offset, "limit": limit}, _wires
    ),
    "keys": lambda after: (
        "keys", (), {"cursor": after, "limit": KEYS_PAGE, "exclude_cleared": True,
                     "order": CREATED_ORDER},
        lambda p: (p.keys, p.next_cursor),
    ),
    "put_messages": lambda key, messages: ("put_messages", (key, messages), {}, _nothing),
    "set": lambda key, messages, ev: ("set", (key, messages), _if_match(ev), _nothing),
    "reset": lambda key, ev: ("reset", (key,), _if_match(ev), _nothing),
    "delete_message": lambda key, index, ev: (
        "delete_message", (key, index), _if_match(ev), lambda done: _wire(done.removed[0])
    ),
    "archive_oldest": lambda key, n, ev: (
        "archive_oldest", (key, n), _if_match(ev), _nothing
    ),
}  # fmt: skip
_CALLS = frozenset(_REMOTE)
_READS_OF_ONE_SESSION = frozenset({"get", "get_all"})  # an unknown session reads as empty


def _answer_error(method: str, e: LedgerAPIError, args: tuple[Any, ...]) -> Any:
    """The domain's answer to an API error: what the local Ledger returns or raises."""
    key = str(args[0]) if args else ""
    if e.code == "session_not_found":
        if method == "head":
            return None
        if method in _READS_OF_ONE_SESSION:
            return []
    raise e.domain_error(key, args[-1] if args else None) from e


def _wire(message: Message) -> dict[str, Any]:
    return message.model_dump()


def _wires(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.to_dict() for m in messages]


# -- choosing a backend ------------------------------------------------------------------


def is_remote(url: str) -> bool:
    return url.startswith(("http://", "https://"))


def without_password(url: str) -> str:
    """`url` with any password dropped (what serialized adapters record)."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}@" if parts.username else ""
    return parts._replace(netloc=user + netloc).geturl()


def open_local(url: str) -> Ledger:
    """One shared in-process Ledger per database URL (its tables must exist).

    The other settings (tokenizer, limits) come from the `LEDGER_*` environment. A URL
    recorded without its password takes it from `LEDGER_DATABASE_URL` when that names
    the same database.
    """
    from ..bootstrap import shared_ledger  # the composition root picks the store

    configured = os.environ.get(DATABASE_URL_ENV, "")
    if configured and without_password(configured) == url:
        url = configured
    return shared_ledger(url)


def make_backend(
    *, ledger: Ledger | None, url: str | None, api_key: str | None, tenant: str | None,
    actor: str | None, tokenizer: Callable[[str], Any] | None = None,
    saved_key: str | None = None,
) -> Backend:  # fmt: skip
    """The backend named by `ledger` (in-process) or `url` (http(s):// or a database URL);
    `saved_key`: the fingerprint of the API key a saved adapter used (api_keys.py)."""
    if ledger is not None:
        return LocalBackend(ledger, tenant=tenant, actor=actor, tokenizer=tokenizer)
    if url is None:
        raise InvalidInput(
            "say where the sessions live: ledger=<Ledger>, url='http(s)://server' or "
            "url='sqlite:///path/ledger.db' / 'postgresql://...'"
        )
    if is_remote(url):
        if tenant is not None or actor is not None or tokenizer is not None:
            raise InvalidInput(
                "tenant, actor and tokenizer_fn are the server's to decide (the API key "
                "names the tenant and actor; LEDGER_TOKENIZER the tokenizer)"
            )
        return RemoteBackend(url, KEYS.key_for(url, api_key, saved_key))
    return LocalBackend(open_local(url), tenant=tenant, actor=actor, tokenizer=tokenizer)
