"""`LedgerSession`: an OpenAI Agents `Session` whose items are a ledger session's messages.

A drop-in for `SQLiteSession`: the same four calls and `session_settings`, on an
in-process `Ledger` or a session-ledger server. What `SQLiteSession` deletes stays in the
ledger's events: `pop_item` is a message removed, `clear_session` a history cleared, so
the audit trail, `get_all(as_of_version=...)` and the export show every item ever added.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
from collections.abc import Callable
from typing import Any, TypeVar

from agents.items import TResponseInputItem
from agents.memory.session_settings import (
    SessionSettings,
    coerce_session_settings,
    resolve_session_limit,
)

from session_ledger.domain.errors import InvalidInput, InvalidMessage
from session_ledger.domain.inputs import check_int, check_key
from session_ledger.domain.ledger import Ledger

from .backend import Items, open_items
from .items import InvalidItem, as_invalid_item, to_messages

T = TypeVar("T")


class LedgerSession:
    """Conversation items in one ledger session (the `Session` protocol of openai-agents).

    `session_id` names the session to the SDK; `key` is its ledger session key (default:
    `session_id`). Where it lives: `ledger=` (in process), or `url=` a server's
    `http(s)://` URL (with `api_key=` or LEDGER_API_KEY) or a database URL. In process,
    `tenant` and `actor` name the writes' tenant and writer; over HTTP the key does.
    """

    session_settings: SessionSettings | None = None

    def __init__(
        self, session_id: str, *, ledger: Ledger | None = None, url: str | None = None,
        api_key: str | None = None, tenant: str | None = None, actor: str | None = None,
        key: str | None = None, session_settings: SessionSettings | dict[str, Any] | None = None,
    ) -> None:  # fmt: skip
        if not isinstance(session_id, str):
            raise InvalidInput(f"session_id must be a string, not {type(session_id).__name__}")
        self.session_id = session_id
        self.key = check_key(session_id if key is None else key)
        self.session_settings = (
            SessionSettings() if session_settings is None
            else coerce_session_settings(session_settings)
        )  # fmt: skip
        self._items: Items = open_items(
            ledger=ledger, url=url, api_key=api_key, tenant=tenant, actor=actor
        )
        self._closed = False

    async def get_items(self, limit: int | None = None) -> list[TResponseInputItem]:
        """The newest `limit` items in order (None: `session_settings.limit`, else all; 0:
        none; below 0: all, as SQLiteSession)."""
        self._check_open()
        limit = resolve_session_limit(limit, self.session_settings)
        if limit is not None:
            if isinstance(limit, bool) or not isinstance(limit, int):
                raise InvalidInput(f"limit must be an integer or None; got {limit!r}")
            limit = int(limit)  # (an IntEnum's member, say: a plain int from here on)
            if limit == 0:
                return []
            # (bounded here, as the ledger bounds it: over HTTP too the refusal is typed)
            limit = None if limit < 0 else check_int("limit", limit, least=1)
        return await _in_thread(self._items.read, self.key, limit)

    async def add_items(self, items: list[TResponseInputItem]) -> None:
        """Append the items, all or none, as one event."""
        self._check_open()
        messages = to_messages(items)
        if messages:
            await _settled(self._add, messages)

    def _add(self, messages: list[dict[str, Any]]) -> None:
        try:
            self._items.add(self.key, messages)
        except InvalidItem:
            raise  # (an item's refusal already: `check` before a write over HTTP)
        except InvalidMessage as e:
            raise as_invalid_item(e) from None

    async def pop_item(self) -> TResponseInputItem | None:
        """Remove the newest item and return it (None: the session holds none); the
        removal is an event, and the item stays in the session's past versions."""
        self._check_open()
        return await _settled(self._items.pop, self.key)

    async def clear_session(self) -> None:
        """Clear the history (an event: the items stay in the past versions)."""
        self._check_open()
        await _settled(self._items.clear, self.key)

    def close(self) -> None:
        """Close the HTTP connections (an in-process Ledger stays open); later calls raise
        RuntimeError."""
        self._closed = True
        self._items.close()

    def _check_open(self) -> None:
        if self._closed:
            raise RuntimeError(f"{type(self).__name__} is closed")


def _in_thread(call: Callable[..., T], *args: Any) -> asyncio.Future[T]:
    """`call(*args)` in the loop's default executor, in a copy of the caller's context
    (what `asyncio.to_thread` does, as SQLiteSession's calls do): the future itself, no
    coroutine or task around it."""
    context = contextvars.copy_context()
    work = functools.partial(context.run, call, *args)
    return asyncio.get_running_loop().run_in_executor(None, work)


async def _settled(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` in a worker thread, awaited to its end even if the caller is
    cancelled meanwhile, and only then the cancellation raised: a cancelled caller never
    leaves a write half-known, and one that retries knows whether the first attempt was
    stored. (The shield is the one object added to the thread's future; a write that is
    not cancelled costs no task.)"""
    work = _in_thread(call, *args)
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError as e:
        cancelled = e
    while not work.done():
        with contextlib.suppress(asyncio.CancelledError):  # (the first one is raised)
            await asyncio.wait({work})
    if not work.cancelled():
        work.exception()  # (retrieved: the cancellation is what the caller hears)
    raise cancelled
