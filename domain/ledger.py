"""The Ledger: the command and query service over sessions (an eventsourcing Application).

The Ledger holds collaborators, each built here with what it uses: the write loop
(`write_loop.py`), which loads a session, runs a command on it and stores the events and
their view rows in one transaction; the reads (`reads.py`, the views only); the stream
commands (`streams.py`); compliance (`compliance.py`); the audit trail
(`audit_trail.py`) and the tenant feed (`tenant_feed.py`). Each public method checks its
arguments or hands the call to its collaborator; the message commands live here, each
handing the write loop what to do to the session.
"""

from __future__ import annotations

import asyncio
import functools
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any, ParamSpec, TypeVar

from eventsourcing.application import Application
from eventsourcing.persistence import Mapper
from eventsourcing.utils import Environment

from .addresses import SessionAddresses
from .audit_trail import AuditTrail
from .compliance import Compliance, RetentionAction, RetentionRule
from .erasure import Erasures
from .errors import InvalidInput, LedgerError, MessageNotFound, SessionErasedError
from .event_mapper import EventMapper
from .inputs import MAX_POSITION, Limits, check_int, check_tenant, parse_messages
from .messages import ChatMessage
from .observer import SILENT, LedgerObserver
from .ports import (
    ACTIVE,
    KEY_ORDER,
    AuditEntry,
    ChainReport,
    MessagesRead,
    SessionHead,
    SessionViews,
    StreamView,
    WriteResult,
)
from .reads import Reads, TokenizerChoice
from .session import Session
from .streams import OpenedStream, Streams, StreamWriter
from .tenant_feed import FeedPage, TenantFeed
from .tokens import LazyCounts, NamedTokenizer, load_tokenizer
from .tuning import (
    DEFAULT_TENANT,
    SNAPSHOT_INTERVAL,
    STREAM_FLUSH_BYTES,
    STREAM_FLUSH_MS,
    TOKEN_LIMIT,
    TOKENIZER,
    WRITE_RETRIES,
    Tuning,
)
from .write_loop import Command, WriteLoop

P = ParamSpec("P")
R = TypeVar("R")


def _async_twin(method: Callable[P, R]) -> Callable[P, Any]:
    @functools.wraps(method)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, *args, **kwargs)

    twin.__doc__ = f"Async twin of `{method.__name__}` (runs it in a worker thread)."
    return twin


class Ledger(Application[uuid.UUID]):
    """Sessions of chat history, addressed by (tenant, key), kept as event streams."""

    name = "ledger"

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        tokenizer: NamedTokenizer | None = None,
        limits: Limits | None = None,
        default_tenant: str = DEFAULT_TENANT,
        default_actor: str = "local",
        token_limit: int = TOKEN_LIMIT,
        write_retries: int = WRITE_RETRIES,
        snapshot_interval: int = SNAPSHOT_INTERVAL,
        stream_flush_bytes: int = STREAM_FLUSH_BYTES,
        stream_flush_ms: int = STREAM_FLUSH_MS,
        observer: LedgerObserver = SILENT,
    ) -> None:
        self._tuning = Tuning(limits or Limits(), tokenizer or load_tokenizer(TOKENIZER), observer)
        self.default_tenant = check_tenant(default_tenant)
        self.default_actor = default_actor
        self.token_limit = token_limit
        self.stream_flush_bytes = stream_flush_bytes
        self.stream_flush_ms = stream_flush_ms
        # Snapshots are taken by the write loop, not by the library (which would read the
        # stream back to the version first): none in `snapshotting_intervals`.
        super().__init__({**env, "IS_SNAPSHOTTING_ENABLED": "y"})
        views = getattr(self.recorder, "views", None)  # the store's recorder holds its views
        if not isinstance(views, SessionViews):
            raise TypeError(f"{type(self.recorder).__name__} does not serve the session views")
        self.views: SessionViews = views
        addresses = SessionAddresses(self.default_tenant)
        erasures = self._erasures = Erasures(self.views, self.events)
        self._writes = WriteLoop(
            self.views, self.events, self.snapshots, self.repository, self._tuning, addresses,
            erasures, default_actor=default_actor, retries=write_retries,
            snapshot_interval=snapshot_interval,
        )  # fmt: skip
        self._reads = Reads(self.views, self._tuning, addresses, erasures, token_limit)
        self._compliance = Compliance(
            self.views, self.events, self.repository, self._writes, addresses
        )
        self._audit_trail = AuditTrail(self.views, self.events, self.recorder, addresses)
        self._feed = TenantFeed(self.views, self.events, addresses)
        self._streams = Streams(self.views, self._writes, self._tuning, addresses, erasures)

    # What the collaborators read at each call; setting one here reaches every one of them.

    @property
    def limits(self) -> Limits:
        """The size limits of writes and reads."""
        return self._tuning.limits

    @limits.setter
    def limits(self, limits: Limits) -> None:
        self._tuning.limits = limits

    @property
    def tokenizer(self) -> NamedTokenizer:
        """The tokenizer whose counts the views keep."""
        return self._tuning.tokenizer

    @tokenizer.setter
    def tokenizer(self, tokenizer: NamedTokenizer) -> None:
        self._tuning.tokenizer = tokenizer

    @property
    def observer(self) -> LedgerObserver:
        """What is told of the ledger's store calls and writes (the API's metrics and
        tracing; silent by default)."""
        return self._tuning.observer

    @observer.setter
    def observer(self, observer: LedgerObserver) -> None:
        self._tuning.observer = observer

    def construct_env(self, name: str, env: Mapping[str, str] | None = None) -> Environment:
        # Only the composition root configures the store: no stray os.environ settings.
        return Environment(name, dict(env or {}))

    def construct_mapper(self) -> Mapper[uuid.UUID]:
        # The library's extension point: the mapper class (a store may still make its
        # own, as a sealing store does), unless the environment names one.
        mapper_class = None if self.env.get(self.factory.MAPPER_TOPIC) else EventMapper
        return self.factory.mapper(self.construct_transcoder(), mapper_class)

    # -- writes ---------------------------------------------------------------------------

    def put(self, key: str, message: ChatMessage | Mapping[str, Any], **kw: Any) -> WriteResult:
        """Append one message."""
        return self.put_messages(key, [message], **kw)

    def put_messages(
        self, key: str, messages: Iterable[ChatMessage | Mapping[str, Any]], **kw: Any
    ) -> WriteResult:
        """Append messages, all or none, as one event."""
        parsed = parse_messages(messages, self._tuning.limits, allow_empty=False)
        tokenizer = self._tuning.tokenizer
        counts = tuple(map(tokenizer.count, parsed.contents))  # (no generator: a put's one)
        return self._writes.write(
            key, "append", {"messages": parsed.dicts}, create=True, counts=counts,
            texts=parsed.texts, command=lambda s, a: s.append(parsed.dicts, **a), **kw,
        )  # fmt: skip

    def set(
        self, key: str, messages: Iterable[ChatMessage | Mapping[str, Any]], **kw: Any
    ) -> WriteResult:
        """Replace the whole active history (the old one stays in the events)."""
        parsed = parse_messages(messages, self._tuning.limits, allow_empty=True)
        counts = LazyCounts(self._tuning.tokenizer, parsed.contents)

        def command(s: Session, audit: dict[str, Any]) -> None:
            # The first messages that are the same bytes as the current ones keep their
            # ids (and rows): an agent that sets its whole history every turn stores each
            # message once in the views.
            current = (
                self.views.history(s.id, ACTIVE, 0, len(parsed.texts)).json()
                if s.message_count
                else []
            )
            kept = _common_prefix(current, parsed.texts)
            counts.count_from(kept)
            s.replace(messages=parsed.dicts, kept=kept, **audit)

        return self._writes.write(
            key, "replace", {"messages": parsed.dicts}, create=True, counts=counts,
            texts=parsed.texts, command=command, **kw,
        )  # fmt: skip

    def reset(self, key: str, **kw: Any) -> WriteResult:
        """Clear the history, active and archived."""
        return self._writes.write(key, "clear", {}, command=lambda s, a: s.clear(**a), **kw)

    def delete_message(self, key: str, index: int, **kw: Any) -> WriteResult:
        """Remove the message at `index` (negative counts from the end); `.removed` has it."""
        check_int("index", index)
        if abs(index) > MAX_POSITION:
            raise InvalidInput(f"index must be within ±2**62; got {index!r}")
        command = self._remover(index)
        return self._writes.write(key, "remove", {"index": index}, command=command, **kw)

    def delete_last_message(self, key: str, **kw: Any) -> WriteResult:
        """Remove the newest message; `.removed` has it."""
        return self._writes.write(key, "remove", {"index": -1}, command=self._remover(-1), **kw)

    def archive_oldest(self, key: str, n: int, **kw: Any) -> WriteResult:
        """Move the `n` oldest active messages to the archive (status "archived")."""
        check_int("n", n, least=1)

        def command(s: Session, audit: dict[str, Any]) -> None:
            s.archive(count=min(n, s.message_count), **audit)

        return self._writes.write(key, "archive", {"n": n}, command=command, **kw)

    def _remover(self, index: int) -> Command:
        def command(s: Session, audit: dict[str, Any]) -> tuple[ChatMessage]:
            position = index + s.message_count if index < 0 else index
            found = (
                self.views.message_at(s.id, position, s.message_count) if position >= 0 else None
            )
            if found is None:
                raise _no_message(index, s.key, s.message_count)
            message_id, message = found
            s.remove(position=position, message_id=message_id, message=message.to_dict(), **audit)
            return (message,)

        return command

    # -- reads ---------------------------------------------------------------------------

    def get(
        self, key: str, *, tenant: str | None = None, token_limit: int | None = None,
        initial_token_count: int = 0, tokenizer: TokenizerChoice = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The context window: the newest messages that fit `token_limit` (ChatMemoryBuffer.get),
        now or as the agent would have been given it at `as_of_version` / `as_of`."""
        return self._reads.get(
            key, tenant=tenant, token_limit=token_limit, initial_token_count=initial_token_count,
            tokenizer=tokenizer, as_of_version=as_of_version, as_of=as_of,
        )  # fmt: skip

    def window(
        self, key: str, *, tenant: str | None = None, token_limit: int | None = None,
        initial_token_count: int = 0, tokenizer: TokenizerChoice = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
        min_version: int | None = None,
    ) -> MessagesRead:  # fmt: skip
        """`get` as one read, with the version it is the window of (`Reads.window`)."""
        return self._reads.window(
            key, tenant=tenant, token_limit=token_limit, initial_token_count=initial_token_count,
            tokenizer=tokenizer, as_of_version=as_of_version, as_of=as_of,
            min_version=min_version,
        )  # fmt: skip

    def get_all(
        self, key: str, *, tenant: str | None = None, status: str = "active", offset: int = 0,
        limit: int | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, last: int | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The whole history in order (or a page of it); `status="archived"` for the archive;
        as it stood at `as_of_version` or at time `as_of` when given; `last`: the newest
        `last` messages, in order (instead of an offset)."""
        return self._reads.get_all(
            key, tenant=tenant, status=status, offset=offset, limit=limit,
            as_of_version=as_of_version, as_of=as_of, last=last,
        )  # fmt: skip

    def history(
        self, key: str, *, tenant: str | None = None, status: str = "active", offset: int = 0,
        limit: int | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, min_version: int | None = None,
        last: int | None = None,
    ) -> MessagesRead:  # fmt: skip
        """`get_all` as one read, with the version its messages are of (`Reads.history`)."""
        return self._reads.history(
            key, tenant=tenant, status=status, offset=offset, limit=limit,
            as_of_version=as_of_version, as_of=as_of, min_version=min_version, last=last,
        )  # fmt: skip

    def page(
        self, key: str, *, tenant: str | None = None, status: str = "active", offset: int = 0,
        limit: int | None = None, after: int | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, min_version: int | None = None,
        last: int | None = None,
    ) -> MessagesRead:  # fmt: skip
        """A page of the history, as one answer holds it (`Reads.page`)."""
        return self._reads.page(
            key, tenant=tenant, status=status, offset=offset, limit=limit, after=after,
            as_of_version=as_of_version, as_of=as_of, min_version=min_version, last=last,
        )  # fmt: skip

    def head(
        self, key: str, *, tenant: str | None = None, as_of_version: int | None = None,
        as_of: datetime | None = None, min_version: int | None = None, latest: bool = False,
    ) -> SessionHead:  # fmt: skip
        """The session's version, counts and times (`Reads.head`); SessionNotFound if none."""
        return self._reads.head(
            key, tenant=tenant, as_of_version=as_of_version, as_of=as_of,
            min_version=min_version, latest=latest,
        )  # fmt: skip

    def keys(
        self, *, tenant: str | None = None, prefix: str = "", after: str | None = None,
        limit: int = 100, exclude_cleared: bool = False, order: str = KEY_ORDER,
    ) -> list[str]:  # fmt: skip
        """Session keys of a tenant, in `order`, from after `after` (`Reads.keys`)."""
        return self._reads.keys(
            tenant=tenant, prefix=prefix, after=after, limit=limit,
            exclude_cleared=exclude_cleared, order=order,
        )  # fmt: skip

    # -- compliance ------------------------------------------------------------------------

    def erase(self, key: str, *, reason: str, basis: str, **kw: Any) -> WriteResult:
        """Erase the session's content for good (`Compliance.erase`); `kw`: `tenant`,
        `actor`, `expected_version`, `idempotency_key`, as every write takes them."""
        return self._compliance.erase(key, reason=reason, basis=basis, **kw)

    def place_hold(self, key: str, *, reference: str, reason: str, **kw: Any) -> WriteResult:
        """Put the session under a legal hold (`reference`: the matter or ticket), beside
        any it holds already. HoldConflict if it holds one under this reference."""
        return self._compliance.place_hold(key, reference=reference, reason=reason, **kw)

    def release_hold(self, key: str, *, reference: str, reason: str, **kw: Any) -> WriteResult:
        """Release the hold placed under `reference`; the others stay. HoldNotFound if the
        session holds none under it."""
        return self._compliance.release_hold(key, reference=reference, reason=reason, **kw)

    def encrypt(
        self, key: str, *, tenant: str | None = None, actor: str | None = None
    ) -> WriteResult | None:
        """Seal the content of a session stored clear (`Compliance.encrypt`)."""
        return self._compliance.encrypt(key, tenant=tenant, actor=actor)

    def encrypt_all(self, actor: str | None = None) -> Iterator[tuple[str, str, bool]]:
        """`encrypt` every session of every tenant (`Compliance.encrypt_all`)."""
        return self._compliance.encrypt_all(actor)

    def erasure(self, session_id: uuid.UUID, key: str) -> SessionErasedError | None:
        """The `SessionErasedError` of an erased session (when, why, on what basis), else
        None."""
        return self._erasures.error(session_id, key)

    def retention(
        self, rules: list[RetentionRule], now: datetime, *, dry_run: bool = True
    ) -> Iterator[RetentionAction]:
        """Apply each retention rule at time `now` (`Compliance.retention`)."""
        return self._compliance.retention(rules, now, dry_run=dry_run)

    # -- streams -------------------------------------------------------------------------

    def stream(
        self, key: str, *, role: str = "assistant", stream_id: str | None = None,
        turn: str | None = None, parent: str | None = None, **kw: Any,
    ) -> StreamWriter:  # fmt: skip
        """A stream writer: `with ledger.stream(key) as s: s.write(delta)` opens the stream,
        flushes its deltas in batches (`stream_flush_bytes`, `stream_flush_ms`), completes
        it at the end of the block and aborts it (cause "error", or "client_gone" when the
        block was cancelled) on an exception."""
        return StreamWriter(self, key, role, stream_id, turn, parent, kw)

    def open_stream(
        self, key: str, *, role: str = "assistant", stream_id: str | None = None,
        turn: str | None = None, parent: str | None = None, **kw: Any,
    ) -> OpenedStream:  # fmt: skip
        """Open a stream (the session is created if need be); its id is new to the session."""
        return self._streams.open_stream(
            key, role=role, stream_id=stream_id, turn=turn, parent=parent, **kw
        )

    def append_stream(
        self, key: str, stream_id: str, deltas: Sequence[str], **kw: Any
    ) -> WriteResult:
        """Append a batch of deltas to an open stream."""
        return self._streams.append_stream(key, stream_id, deltas, **kw)

    def complete_stream(
        self, key: str, stream_id: str, deltas: Sequence[str] = (),
        additional_kwargs: dict[str, Any] | None = None, **kw: Any,
    ) -> WriteResult:  # fmt: skip
        """End a stream: its text (with these last deltas) becomes a message of the history."""
        return self._streams.complete_stream(key, stream_id, deltas, additional_kwargs, **kw)

    def abort_stream(
        self, key: str, stream_id: str, cause: str, deltas: Sequence[str] = (),
        keep_partial: bool = False, **kw: Any,
    ) -> WriteResult:  # fmt: skip
        """End a stream unfinished; `cause` is one of `streams.CAUSES` (`Streams.abort_stream`)."""
        return self._streams.abort_stream(key, stream_id, cause, deltas, keep_partial, **kw)

    def abort_idle_streams(self, idle_seconds: float, *, limit: int = 100) -> int:
        """Abort (cause "timeout") the open streams with no event for `idle_seconds`; how
        many this call aborted (`Streams.abort_idle_streams`)."""
        return self._streams.abort_idle_streams(idle_seconds, limit=limit)

    def stream_state(
        self, key: str, stream_id: str, *, tenant: str | None = None
    ) -> StreamView | None:
        """The stream as its events left it, or None."""
        return self._streams.stream_state(key, stream_id, tenant=tenant)

    # -- the audit trail and the tenant feed ------------------------------------------------

    def audit(
        self, key: str, *, tenant: str | None = None, after_version: int = 0, limit: int = 100
    ) -> list[AuditEntry]:
        """The session's events after `after_version`, oldest first: who changed what, when."""
        return self._audit_trail.audit(key, tenant=tenant, after_version=after_version, limit=limit)

    def verify(
        self, key: str, *, tenant: str | None = None, pinned: Mapping[int, bytes] | None = None
    ) -> ChainReport:
        """Check the session's hash chain against its stored events (`AuditTrail.verify`)."""
        return self._audit_trail.verify(key, tenant=tenant, pinned=pinned)

    def verify_all(self) -> Iterator[ChainReport]:
        """`verify` of every session of every tenant, in (tenant, key) order."""
        return self._audit_trail.verify_all()

    def feed_position(self) -> str:
        """The tenant feed's position now: a read from it gets the events committed later."""
        return self._feed.feed_position()

    def tenant_events(
        self, *, tenant: str | None = None, prefix: str = "", after: str, limit: int = 100
    ) -> FeedPage:
        """The tenant's events (of sessions whose key starts with `prefix`) that follow
        position `after` in the feed, oldest first; at most `limit` events looked at."""
        return self._feed.tenant_events(tenant=tenant, prefix=prefix, after=after, limit=limit)

    aput = _async_twin(put)
    aput_messages = _async_twin(put_messages)
    aset = _async_twin(set)
    areset = _async_twin(reset)
    adelete_message = _async_twin(delete_message)
    adelete_last_message = _async_twin(delete_last_message)
    aarchive_oldest = _async_twin(archive_oldest)
    aaudit = _async_twin(audit)
    aerase = _async_twin(erase)
    aplace_hold = _async_twin(place_hold)
    arelease_hold = _async_twin(release_hold)
    averify = _async_twin(verify)
    aget = _async_twin(get)
    aget_all = _async_twin(get_all)
    ahead = _async_twin(head)
    akeys = _async_twin(keys)
    aopen_stream = _async_twin(open_stream)
    aappend_stream = _async_twin(append_stream)
    acomplete_stream = _async_twin(complete_stream)
    aabort_stream = _async_twin(abort_stream)


def _no_message(index: int, key: str, count: int) -> LedgerError:
    messages = "1 message" if count == 1 else f"{count} messages"
    return MessageNotFound(f"no message at index {index} of session {key!r} ({messages})")


def _common_prefix(old: list[str], new: tuple[str, ...]) -> int:
    """How many leading messages are the same canonical JSON (not merely equal in Python:
    `true` and `1`, `1` and `1.0` are different messages)."""
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return min(len(old), len(new))


__all__ = ["AuditEntry", "Ledger", "Limits", "MessagesRead", "SessionHead", "WriteResult"]
