"""The ledger's queries: the context window, the history, a session's head and the keys,
now or as they were at a past version or moment. Each is one read of the views."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any

from .addresses import SessionAddresses
from .erasure import Erasures
from .errors import InvalidInput, SessionNotFound, StateNotFound
from .inputs import (
    MAX_KEY_CHARS,
    check_int,
    check_key,
    check_limit,
    check_moment,
    check_text,
)
from .messages import ChatMessage
from .observer import READ_HISTORY, READ_WINDOW
from .ports import KEY_ORDER, KEY_ORDERS, STATUSES, MessagesRead, SessionHead, SessionViews, T
from .tokens import NamedTokenizer, callers_tokenizer, check_window_arguments
from .tuning import Tuning

# What a read's `tokenizer=` takes: a named tokenizer, a function, or None for the ledger's.
TokenizerChoice = NamedTokenizer | Callable[[str], Any] | None


def past_version(key: str, head: SessionHead, version: object) -> int:
    """`version`, checked to be one of the session's (1 to its head's): InvalidInput or
    StateNotFound otherwise."""
    version = check_int("as_of_version", version)
    if not 1 <= version <= head.version:
        raise StateNotFound(
            f"session {key!r} has no version {version}; its versions are 1 to {head.version}"
        )
    return version


def _read_version(read: MessagesRead) -> int:
    return read.version


def _head_version(head: SessionHead | None) -> int:
    return 0 if head is None else head.version


class Reads:
    """The queries: each is one read of the views (or of a copy of them, where their read
    routing serves it), checked for an erased session when it finds no rows."""

    def __init__(
        self, views: SessionViews, tuning: Tuning, addresses: SessionAddresses,
        erasures: Erasures, token_limit: int,
    ) -> None:  # fmt: skip
        self._views, self._tuning, self._addresses = views, tuning, addresses
        self._erasures, self._token_limit = erasures, token_limit

    def get(
        self, key: str, *, tenant: str | None = None, token_limit: int | None = None,
        initial_token_count: int = 0, tokenizer: TokenizerChoice = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The context window: the newest messages that fit `token_limit` (ChatMemoryBuffer.get),
        now or as the agent would have been given it at `as_of_version` / `as_of`."""
        return self.window(
            key, tenant=tenant, token_limit=token_limit, initial_token_count=initial_token_count,
            tokenizer=tokenizer, as_of_version=as_of_version, as_of=as_of,
        ).messages()  # fmt: skip

    def window(
        self, key: str, *, tenant: str | None = None, token_limit: int | None = None,
        initial_token_count: int = 0, tokenizer: TokenizerChoice = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
        min_version: int | None = None,
    ) -> MessagesRead:  # fmt: skip
        """`get` as one read: its messages (`.messages()`, or canonical JSON `.json()`) and
        the version they are the window of (`.version`; 0: no such session). `min_version`:
        a version the caller holds (an ETag); the read is of that version or a later one."""
        limit = self._token_limit if token_limit is None else token_limit
        check_int("token_limit", limit)
        check_int("initial_token_count", initial_token_count)
        check_window_arguments(limit, initial_token_count)
        if tokenizer is not None and not isinstance(tokenizer, NamedTokenizer):
            tokenizer = callers_tokenizer(tokenizer)
        if tokenizer is not None and tokenizer.name == self._tuning.tokenizer.name:
            tokenizer = None  # the stored counts are this tokenizer's
        sid = self._addresses.session_id(key, tenant)

        def query(views: SessionViews) -> MessagesRead:
            version = self._version(views, sid, key, tenant, as_of_version, as_of)
            return views.context_window(sid, limit, initial_token_count, tokenizer, version,
                                        self._tuning.limits.max_answer_bytes,
                                        self._tuning.tokenizer)  # fmt: skip

        now = _read_version if as_of_version is None and as_of is None else None
        with self._tuning.observer.store_call(READ_WINDOW):
            read = self._query(sid, min_version, as_of_version, query, now)
        return self._unless_erased(read, sid, key)

    def get_all(
        self, key: str, *, tenant: str | None = None, status: str = "active", offset: int = 0,
        limit: int | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, last: int | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The whole history in order (or a page of it); `status="archived"` for the archive;
        as it stood at `as_of_version` or at time `as_of` when given; `last`: its newest
        `last` messages (in order), read as many rows as that however long the history."""
        return self.history(
            key, tenant=tenant, status=status, offset=offset, limit=limit,
            as_of_version=as_of_version, as_of=as_of, last=last,
        ).messages()  # fmt: skip

    def history(
        self, key: str, *, tenant: str | None = None, status: str = "active", offset: int = 0,
        limit: int | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, min_version: int | None = None,
        last: int | None = None,
    ) -> MessagesRead:  # fmt: skip
        """`get_all` as one read, with the version its messages are of (see `window`)."""
        if status not in STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
        check_int("offset", offset, least=0)
        if limit is not None:
            check_int("limit", limit, least=0)
        _check_last(last, offset)
        sid = self._addresses.session_id(key, tenant)

        def query(views: SessionViews) -> MessagesRead:
            version = self._version(views, sid, key, tenant, as_of_version, as_of)
            return views.history(sid, status, offset, limit, version, last)

        now = _read_version if as_of_version is None and as_of is None else None
        with self._tuning.observer.store_call(READ_HISTORY):
            read = self._query(sid, min_version, as_of_version, query, now)
        return self._unless_erased(read, sid, key)

    def page(
        self, key: str, *, tenant: str | None = None, status: str = "active", offset: int = 0,
        limit: int | None = None, after: int | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, min_version: int | None = None,
        last: int | None = None,
    ) -> MessagesRead:  # fmt: skip
        """A page of the history, as one answer holds it: at most `limit` messages (at most
        the `max_page_messages` limit, also when None), ending before `max_answer_bytes` of
        them (the first whatever its size), from `offset`, from the `last`-th newest
        message, or from after a page's `next_after`. Read the page after one with its
        version as `as_of_version`: the pages of one read are then of one version,
        whatever was written between them."""
        if status not in STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
        check_int("offset", offset, least=0)
        most = self._tuning.limits.max_page_messages
        limit = most if limit is None else min(check_int("limit", limit, least=0), most)
        if after is not None:
            check_int("after", after, least=0)
            if offset or as_of_version is None:
                raise InvalidInput("a page after another is of its version: give after with "
                                   "that page's as_of_version, and no offset")  # fmt: skip
        _check_last(last, offset)
        if last is not None and after is not None:
            raise InvalidInput("give last or after, not both")
        sid = self._addresses.session_id(key, tenant)

        def query(views: SessionViews) -> MessagesRead:
            version = self._version(views, sid, key, tenant, as_of_version, as_of)
            return views.history_page(sid, status, offset, limit,
                                      self._tuning.limits.max_answer_bytes, version, after,
                                      last)  # fmt: skip

        now = _read_version if as_of_version is None and as_of is None else None
        with self._tuning.observer.store_call(READ_HISTORY):
            read = self._query(sid, min_version, as_of_version, query, now)
        read = self._unless_erased(read, sid, key)
        if after is not None and limit and not len(read):
            # A page's `next_after` is given only where rows follow it, at its version
            # (which the page after reads): none following, it was never given.
            raise InvalidInput("cursor is not one this history returned (its next_cursor)")
        return read

    def head(
        self, key: str, *, tenant: str | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, min_version: int | None = None, latest: bool = False,
    ) -> SessionHead:  # fmt: skip
        """The session's version, counts and times (as they stood at `as_of_version` or
        `as_of` when given); SessionNotFound if it has none. `latest`: as the next write
        will find it (never from a copy of the views that may trail)."""
        sid = self._addresses.session_id(key, tenant)

        def query(views: SessionViews) -> SessionHead | None:
            return views.session_head(
                sid, self._version(views, sid, key, tenant, as_of_version, as_of)
            )

        now = as_of_version is None and as_of is None
        found = (
            query(self._views) if latest
            else self._query(sid, min_version, as_of_version, query, _head_version if now else None)
        )  # fmt: skip
        if found is None:
            raise SessionNotFound(self._addresses.tenant(tenant), key)
        return found

    def keys(
        self, *, tenant: str | None = None, prefix: str = "", after: str | None = None,
        limit: int = 100, exclude_cleared: bool = False, order: str = KEY_ORDER,
    ) -> list[str]:  # fmt: skip
        """Session keys of a tenant in `order` ("key", or "created": the order the sessions
        were made in), from after the key `after` in that order, starting with `prefix`;
        `exclude_cleared`: not those whose last change was a reset or an erasure (what
        LlamaIndex's chat stores list as keys: a reset deletes the key there)."""
        check_limit("limit", limit, 10_000)
        check_text(prefix, "prefix", MAX_KEY_CHARS, allow_empty=True)
        if after is not None:
            check_key(after)
        if order not in KEY_ORDERS:
            raise InvalidInput(f"order must be one of {', '.join(KEY_ORDERS)}; got {order!r}")
        tenant = self._addresses.tenant(tenant)
        return self._query(
            None, None, None,
            lambda views: views.session_keys(
                tenant, prefix, after, limit, exclude_cleared, order
            ),
        )  # fmt: skip

    def _query(
        self, sid: uuid.UUID | None, min_version: int | None, as_of_version: int | None,
        query: Callable[[SessionViews], T], version: Callable[[T], int] | None = None,
    ) -> T:  # fmt: skip
        """`query` on the views, or where their read routing serves it: a copy where the
        session is at `min_version` (a version the caller holds; `as_of_version` names one
        too) or past it. `version`: the session's version a result shows (a read of now)."""
        least = 0 if min_version is None else check_int("min_version", min_version, least=0)
        if as_of_version is not None:
            least = max(least, check_int("as_of_version", as_of_version))
        routing = self._views.read_routing
        return query(self._views) if routing is None else routing.read(sid, least, query, version)

    def _version(
        self, views: SessionViews, sid: uuid.UUID, key: str, tenant: str | None,
        as_of_version: int | None, as_of: datetime | None,
    ) -> int | None:  # fmt: skip
        """The version a point-in-time read names (None: now); StateNotFound if none."""
        if as_of_version is None and as_of is None:
            return None
        if as_of_version is not None and as_of is not None:
            raise InvalidInput("give as_of_version or as_of, not both")
        when = None if as_of is None else check_moment("as_of", as_of)
        head = views.session_head(sid)
        if head is None:
            raise SessionNotFound(self._addresses.tenant(tenant), key)
        if when is not None:
            version = views.version_at(sid, when)
            if version is None:
                raise StateNotFound(
                    f"session {key!r} did not exist yet at {when.isoformat()}; it was "
                    f"started at {head.created_at.isoformat()}"
                )
            return version
        return past_version(key, head, as_of_version)

    def _unless_erased(self, read: MessagesRead, sid: uuid.UUID, key: str) -> MessagesRead:
        """`read`, unless its session was erased (SessionErasedError). Erasure drops every row of
        the session, so only a read that found none asks (one more read, rarely)."""
        if not len(read) and read.version:
            erased = self._erasures.error(sid, key)
            if erased is not None:
                raise erased
        return read


def _check_last(last: int | None, offset: int) -> None:
    """`last` (the newest messages) is a count, and says where a read starts: no offset."""
    if last is not None:
        check_int("last", last, least=0)
        if offset:
            raise InvalidInput("give offset or last, not both")
