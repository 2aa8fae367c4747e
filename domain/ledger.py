"""The Ledger: the command and query service over sessions (an eventsourcing Application).

A write loads the session's O(1) state (the repository's cache; a snapshot and the
events after it on a miss), runs a command on it, and saves it with `Application.save`,
handing the recorder a `WriteBatch` (the library's `saved_kwargs`): the recorder stores
the events and their view rows in one transaction. A cached copy made stale by another
process fails to save on the events' primary key; the write is then retried on fresh
state, unless it names a stale `expected_version`.

Every write has a write id: the caller's idempotency key, or one made here. A save
whose outcome is unknown (the connection lost around COMMIT, or a retry that finds its
own version taken) is settled by asking the views whether that id committed, never by
writing again. Reads go to the views only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import time
import uuid
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, ParamSpec, TypeVar

from eventsourcing.application import AggregateNotFoundError, Application
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError
from eventsourcing.utils import Environment

from .audit import AuditTrail
from .compliance import Compliance
from .errors import (
    IdempotencyKeyReused,
    LedgerError,
    MessageNotFound,
    SessionNotFound,
    VersionConflict,
)
from .feed import TenantFeed
from .inputs import (
    Limits,
    check_int,
    check_key,
    check_tenant,
    check_write_options,
    parse_messages,
    request_digest,
)
from .messages import ChatMessage
from .observer import SILENT, WRITE, LedgerObserver
from .ports import (
    ACTIVE,
    AuditEntry,
    MessagesRead,
    PriorWrite,
    SessionHead,
    SessionViews,
    WriteBatch,
    WriteResult,
)
from .reads import Reads
from .session import Session, session_id
from .streams import StreamCommands
from .tokens import LazyCounts, NamedTokenizer, TokenCount, load_tokenizer

P = ParamSpec("P")
R = TypeVar("R")
Command = Callable[[Session, dict[str, Any]], Any]
# The back-off of a write that lost a race draws from its own generator: a library that
# drew from the module's would move the application's seeded `random` stream.
_RETRY_JITTER = random.Random()


def _async_twin(method: Callable[P, R]) -> Callable[P, Any]:
    @functools.wraps(method)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, *args, **kwargs)

    twin.__doc__ = f"Async twin of `{method.__name__}` (runs it in a worker thread)."
    return twin


class Ledger(Compliance, StreamCommands, AuditTrail, TenantFeed, Application[uuid.UUID]):
    """Sessions of chat history, addressed by (tenant, key), kept as event streams."""

    name = "ledger"
    observer: LedgerObserver = SILENT  # the API sets its metrics and tracing here

    def __init__(
        self,
        env: Mapping[str, str],
        *,
        tokenizer: NamedTokenizer | None = None,
        limits: Limits | None = None,
        default_tenant: str = "default",
        default_actor: str = "local",
        token_limit: int = 3000,
        write_retries: int = 100,
        snapshot_interval: int = 200,
        stream_flush_bytes: int = 1024,
        stream_flush_ms: int = 250,
    ) -> None:
        # Snapshots are taken by `_snapshot_if_due`, not by the library (which would read
        # the stream back to the version first): none in `snapshotting_intervals`.
        self.snapshot_interval = snapshot_interval
        self.tokenizer = tokenizer or load_tokenizer("cl100k_base")
        self.limits = limits or Limits()
        self.default_tenant = check_tenant(default_tenant)
        self.default_actor = default_actor
        self.token_limit = token_limit
        self.write_retries = write_retries
        self.stream_flush_bytes = stream_flush_bytes
        self.stream_flush_ms = stream_flush_ms
        super().__init__({**env, "IS_SNAPSHOTTING_ENABLED": "y"})
        if not isinstance(self.recorder, SessionViews):
            raise TypeError(f"{type(self.recorder).__name__} does not serve the session views")
        self.views: SessionViews = self.recorder

    def construct_env(self, name: str, env: Mapping[str, str] | None = None) -> Environment:
        # Only the composition root configures the store: no stray os.environ settings.
        return Environment(name, dict(env or {}))

    # -- writes ---------------------------------------------------------------------------

    def put(self, key: str, message: ChatMessage | Mapping[str, Any], **kw: Any) -> WriteResult:
        """Append one message."""
        return self.put_messages(key, [message], **kw)

    def put_messages(
        self, key: str, messages: Iterable[ChatMessage | Mapping[str, Any]], **kw: Any
    ) -> WriteResult:
        """Append messages, all or none, as one event."""
        parsed = parse_messages(messages, self.limits, allow_empty=False)
        counts = tuple(self.tokenizer.count(m.content) for m in parsed.messages)
        return self._write(
            key, "append", {"messages": parsed.dicts}, create=True, counts=counts,
            texts=parsed.texts, command=lambda s, a: s.append(parsed.dicts, **a), **kw,
        )  # fmt: skip

    def set(
        self, key: str, messages: Iterable[ChatMessage | Mapping[str, Any]], **kw: Any
    ) -> WriteResult:
        """Replace the whole active history (the old one stays in the events)."""
        parsed = parse_messages(messages, self.limits, allow_empty=True)
        counts = LazyCounts(self.tokenizer, [m.content for m in parsed.messages])

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

        return self._write(
            key, "replace", {"messages": parsed.dicts}, create=True, counts=counts,
            texts=parsed.texts, command=command, **kw,
        )  # fmt: skip

    def reset(self, key: str, **kw: Any) -> WriteResult:
        """Clear the history, active and archived."""
        return self._write(key, "clear", {}, command=lambda s, a: s.clear(**a), **kw)

    def delete_message(self, key: str, index: int, **kw: Any) -> WriteResult:
        """Remove the message at `index` (negative counts from the end); `.removed` has it."""
        check_int("index", index)
        return self._write(key, "remove", {"index": index}, command=self._remover(index), **kw)

    def delete_last_message(self, key: str, **kw: Any) -> WriteResult:
        """Remove the newest message; `.removed` has it."""
        return self._write(key, "remove", {"index": -1}, command=self._remover(-1), **kw)

    def archive_oldest(self, key: str, n: int, **kw: Any) -> WriteResult:
        """Move the `n` oldest active messages to the archive (status "archived")."""
        check_int("n", n, least=1)

        def command(s: Session, audit: dict[str, Any]) -> None:
            s.archive(count=min(n, s.message_count), **audit)

        return self._write(key, "archive", {"n": n}, command=command, **kw)

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

    def _write(
        self,
        key: str,
        op: str,
        request: dict[str, Any],
        *,
        command: Command,
        create: bool = False,
        counts: Sequence[TokenCount] = (),
        texts: tuple[str, ...] = (),
        tenant: str | None = None,
        actor: str | None = None,
        reason: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        tenant = self._tenant(tenant)
        check_key(key)
        check_write_options(actor, reason, expected_version, idempotency_key)
        sid = session_id(tenant, key)
        # The write id: the caller's key (with the digest of what it asked, so a key
        # reused for another write is refused), or one of our own.
        digest = None if idempotency_key is None else request_digest(op, request)
        write_id = idempotency_key or f"w-{uuid.uuid4().hex}"
        audit: dict[str, Any] = {
            "actor": actor or self.default_actor,
            "reason": reason,
            "idempotency_key": write_id,
            "request_digest": digest,
        }
        fresh = False  # True once the cached state may be behind another process's writes
        for attempt in range(self.write_retries):
            if idempotency_key is not None:
                prior = self.views.prior_write(sid, write_id)
                if prior is not None:
                    return _replayed(prior, digest, idempotency_key, key)
            session = self._load(sid, fresh=fresh)
            if session is not None and session.erased:
                raise self.erasure(sid, key) or LedgerError(f"session {key!r} was erased")
            actual = session.version if session else 0
            if expected_version is not None and expected_version != actual:
                if not fresh:
                    fresh = True
                    continue
                self.observer.version_conflict()
                raise VersionConflict(key, expected_version, actual)
            if session is None:
                if not create:
                    raise SessionNotFound(tenant, key)
                session = Session(tenant=tenant, key=key, **audit)
            first_message_id = session.next_message_id
            removed: tuple[ChatMessage, ...] = command(session, audit) or ()
            batch = WriteBatch(
                session_id=sid, tenant=tenant, key=key, events=tuple(session.collect_events()),
                first_message_id=first_message_id, message_count=session.message_count,
                archived_count=session.archived_count, next_message_id=session.next_message_id,
                counts=counts, bodies=texts,
            )  # fmt: skip
            since = batch.events[0].originator_version
            try:
                # Straight to the event store (the library's public `EventStore.put`):
                # `Application.save` only adds, per object saved, runtime `Protocol`
                # checks that cost 12% of a put's instructions on Python 3.11; the
                # state saved is cached and snapshotted below, as `save` would.
                with self.observer.store_call(WRITE):
                    self.events.put(batch.events, ledger_batch=batch)
            except (IntegrityError, OperationalError, InterfaceError) as error:
                # Another writer took the version; or this write committed and its answer
                # was lost (the store's retry then met its own row, or the connection
                # dropped around COMMIT): ask whether its id committed (this raises again
                # while the store stays unreachable).
                done = self.views.prior_write(sid, write_id, since=since)
                if done is not None:
                    return WriteResult(done.version, done.message_count, removed=removed)
                if not isinstance(error, IntegrityError):
                    raise
                fresh = True
                if expected_version is not None:
                    self.observer.version_conflict()
                    head = self.views.session_head(sid)
                    raise VersionConflict(
                        key, expected_version, head.version if head else 0
                    ) from None
                self.observer.write_retried()
                time.sleep(_RETRY_JITTER.uniform(0, 0.002 * min(attempt + 1, 10)))
                continue
            self.observer.events_written([type(event).__name__ for event in batch.events])
            if self.repository.cache is not None:
                self.repository.cache.put(sid, session)
            self._snapshot_if_due(session, len(batch.events))
            return WriteResult(session.version, session.message_count, removed=removed)
        raise LedgerError(
            f"session {key!r}: write lost the race {self.write_retries} times; try again"
        )

    def _snapshot_if_due(self, session: Session, new_events: int) -> None:
        """A snapshot of the state just saved, when a multiple of the interval is among the
        versions it reached. A snapshot only saves reads: one that fails (the store gone
        after the write committed) is skipped, never reported as the write's failure."""
        version, interval = session.version, self.snapshot_interval
        if self.snapshots is None or version // interval <= (version - new_events) // interval:
            return
        with contextlib.suppress(IntegrityError, OperationalError, InterfaceError):
            self.snapshots.put([Session.Snapshot.take(session)])

    def _load(self, sid: uuid.UUID, *, fresh: bool) -> Session | None:
        """The session's write state: cached without a read (a stale copy fails to save and
        is then reloaded), or from the latest snapshot and the events after it."""
        cache = self.repository.cache
        if fresh and cache is not None:
            with contextlib.suppress(KeyError):
                cache.get(sid, evict=True)
        try:
            session: Session = self.repository.get(sid)
        except AggregateNotFoundError:
            return None
        return session

    aput = _async_twin(put)
    aput_messages = _async_twin(put_messages)
    aset = _async_twin(set)
    areset = _async_twin(reset)
    adelete_message = _async_twin(delete_message)
    adelete_last_message = _async_twin(delete_last_message)
    aarchive_oldest = _async_twin(archive_oldest)
    aaudit = _async_twin(AuditTrail.audit)
    aerase = _async_twin(Compliance.erase)
    aplace_hold = _async_twin(Compliance.place_hold)
    arelease_hold = _async_twin(Compliance.release_hold)
    averify = _async_twin(AuditTrail.verify)
    aget = _async_twin(Reads.get)
    aget_all = _async_twin(Reads.get_all)
    ahead = _async_twin(Reads.head)
    akeys = _async_twin(Reads.keys)
    aopen_stream = _async_twin(StreamCommands.open_stream)
    aappend_stream = _async_twin(StreamCommands.append_stream)
    acomplete_stream = _async_twin(StreamCommands.complete_stream)
    aabort_stream = _async_twin(StreamCommands.abort_stream)


def _replayed(prior: PriorWrite, digest: str | None, idempotency_key: str, key: str) -> WriteResult:
    if prior.request_digest != digest:
        raise IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was used for a different write to session {key!r}"
        )
    return WriteResult(prior.version, prior.message_count, replayed=True)


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
