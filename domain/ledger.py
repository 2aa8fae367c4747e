"""The Ledger: the command and query service over sessions (an eventsourcing Application).

Writes load the session's O(1) state (cached per process; a snapshot and the events
after it on a miss), append events, and hand them with their view rows to the
recorder, which stores both in one transaction. The cache is trusted without a read:
a copy made stale by another process fails to save on the events' primary key, and
the write is retried on fresh state. One that names a stale `expected_version` is
refused. An append to a session the process holds (cached, its last hash known to the
store) takes the store's short path where it has one (SQLite): the same event, record
and rows, without the write batch and the general projection of events to rows. Reads
go to the views only.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import hashlib
import json
import random
import re
import time
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, ParamSpec, TypeVar, cast

from eventsourcing.application import AggregateNotFoundError, Application, ProcessingEvent
from eventsourcing.persistence import IntegrityError, Mapper
from eventsourcing.utils import Environment

from .errors import (
    IdempotencyKeyReused,
    InvalidInput,
    InvalidSessionKey,
    LedgerError,
    MessageNotFound,
    PayloadTooLarge,
    SessionNotFound,
    StateNotFound,
    VersionConflict,
)
from .integrity import GENESIS, chain_step
from .messages import ChatMessage, body_json, stored_body
from .ports import (
    ACTIVE,
    STATUSES,
    Append,
    AppendsRows,
    AuditEntry,
    ChainReport,
    SessionHead,
    SessionViews,
    WriteBatch,
    WriteResult,
)
from .records import LedgerMapper
from .session import (
    HistoryCleared,
    HistoryReplaced,
    MessageRemoved,
    MessagesAppended,
    Session,
    SessionStarted,
    session_id,
)
from .tokens import (
    LazyCounts,
    NamedTokenizer,
    TokenCount,
    check_window_arguments,
    load_tokenizer,
)

P = ParamSpec("P")
R = TypeVar("R")
MAX_KEY_CHARS = 512
MAX_TENANT_CHARS = 128
MAX_IDEMPOTENCY_KEY_CHARS = 256
MAX_ACTOR_CHARS = 256
MAX_REASON_CHARS = 4096
VERIFY_PAGE = 1000  # events (and hashes) read per step of `verify`
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
# The back-off of a write that lost a race draws from its own generator: a library that
# drew from the module's would move the application's seeded `random` stream.
_RETRY_JITTER = random.Random()


@dataclass(frozen=True)
class Limits:
    """Sizes beyond which a write is refused whole."""

    max_message_bytes: int = 4 * 1024 * 1024
    max_messages_per_write: int = 10_000
    max_write_bytes: int = 32 * 1024 * 1024


def past_version(key: str, head: SessionHead, version: object) -> int:
    """`version`, checked to be one of the session's (1 to its head's): InvalidInput or
    StateNotFound otherwise."""
    version = _check_int("as_of_version", version)
    if not 1 <= version <= head.version:
        raise StateNotFound(
            f"session {key!r} has no version {version}; its versions are 1 to {head.version}"
        )
    return version


def _async_twin(method: Callable[P, R]) -> Callable[P, Any]:
    @functools.wraps(method)
    async def twin(*args: P.args, **kwargs: P.kwargs) -> R:
        return await asyncio.to_thread(method, *args, **kwargs)

    twin.__doc__ = f"Async twin of `{method.__name__}` (runs it in a worker thread)."
    return twin


class Ledger(Application[uuid.UUID]):
    """Sessions of chat history, addressed by (tenant, key), kept as event streams."""

    name = "ledger"
    mapper: LedgerMapper  # (made by construct_mapper)

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
    ) -> None:
        # Per instance, so the interval is a setting rather than a class constant.
        self.snapshotting_intervals = {Session: snapshot_interval}  # type: ignore[misc]
        self.tokenizer = tokenizer or load_tokenizer("cl100k_base")
        self.limits = limits or Limits()
        self.default_tenant = _check_tenant(default_tenant)
        self.default_actor = default_actor
        self.token_limit = token_limit
        self.write_retries = write_retries
        super().__init__({**env, "IS_SNAPSHOTTING_ENABLED": "y"})
        if not isinstance(self.recorder, SessionViews):
            raise TypeError(f"{type(self.recorder).__name__} does not serve the session views")
        self.views: SessionViews = self.recorder
        self._appender = self.recorder if isinstance(self.recorder, AppendsRows) else None

    def construct_mapper(self) -> Mapper[uuid.UUID]:
        # A write's messages are encoded once: their canonical JSON goes into the record.
        return self.factory.mapper(
            transcoder=self.construct_transcoder(), mapper_class=LedgerMapper
        )

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
        parsed, dicts, bodies = self._parse_messages(messages, allow_empty=False)
        counts = tuple(self.tokenizer.count(m.content) for m in parsed)
        done = self._append_rows(key, dicts, counts, bodies, **kw)
        if done is not None:
            return done
        return self._write(
            key, "append", {"messages": dicts}, create=True, counts=counts, bodies=bodies,
            command=lambda s, a: s.append(dicts, **a), **kw,
        )  # fmt: skip

    def set(
        self, key: str, messages: Iterable[ChatMessage | Mapping[str, Any]], **kw: Any
    ) -> WriteResult:
        """Replace the whole active history (the old one stays in the events)."""
        parsed, dicts, bodies = self._parse_messages(messages, allow_empty=True)
        counts = LazyCounts(self.tokenizer, [m.content for m in parsed])  # the new ones only

        def command(s: Session, audit: dict[str, Any]) -> None:
            rows = (
                self.views.history_bodies(s.id, ACTIVE, 0, len(parsed)) if s.message_count else []
            )
            current = ChatMessage.many_from_bodies(rows)
            kept = _common_prefix(current, parsed)
            counts.count_from(kept)
            s.replace(messages=dicts, kept=kept, **audit)

        return self._write(
            key, "replace", {"messages": dicts}, create=True, counts=counts, bodies=bodies,
            command=command, **kw,
        )  # fmt: skip

    def reset(self, key: str, **kw: Any) -> WriteResult:
        """Clear the history, active and archived."""
        return self._write(key, "clear", {}, command=lambda s, a: s.clear(**a), **kw)

    def delete_message(self, key: str, index: int, **kw: Any) -> WriteResult:
        """Remove the message at `index` (negative counts from the end); `.removed` has it."""
        _check_int("index", index)
        return self._write(key, "remove", {"index": index}, command=self._remover(index), **kw)

    def delete_last_message(self, key: str, **kw: Any) -> WriteResult:
        """Remove the newest message; `.removed` has it."""
        return self._write(key, "remove", {"index": -1}, command=self._remover(-1), **kw)

    def archive_oldest(self, key: str, n: int, **kw: Any) -> WriteResult:
        """Move the `n` oldest active messages to the archive (status "archived")."""
        _check_int("n", n, least=1)

        def command(s: Session, audit: dict[str, Any]) -> None:
            s.archive(count=min(n, s.message_count), **audit)

        return self._write(key, "archive", {"n": n}, command=command, **kw)

    def _remover(self, index: int) -> Callable[[Session, dict[str, Any]], Any]:
        def command(s: Session, audit: dict[str, Any]) -> tuple[ChatMessage]:
            position = index + s.message_count if index < 0 else index
            found = (
                self.views.message_at(s.id, position, s.message_count) if position >= 0 else None
            )
            if found is None:
                raise MessageNotFound(
                    f"no message at index {index} of session {s.key!r} "
                    f"({_messages(s.message_count)})"
                )
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
        command: Callable[[Session, dict[str, Any]], Any],
        create: bool = False,
        counts: Sequence[TokenCount] = (),
        bodies: tuple[str, ...] = (),
        tenant: str | None = None,
        actor: str | None = None,
        reason: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult:
        tenant = self._tenant(tenant)
        _check_key(key)
        _check_write_options(actor, reason, expected_version, idempotency_key)
        sid = session_id(tenant, key)
        digest = _digest(op, request) if idempotency_key is not None else None
        audit: dict[str, Any] = {
            "actor": actor or self.default_actor,
            "reason": reason,
            "idempotency_key": idempotency_key,
            "request_digest": digest,
        }
        fresh = False  # True once the cached state may be behind another process's writes
        for attempt in range(self.write_retries):
            if idempotency_key is not None and digest is not None:
                prior = self.views.prior_write(sid, idempotency_key)
                if prior is not None:
                    if prior.request_digest != digest:
                        raise IdempotencyKeyReused(
                            f"idempotency key {idempotency_key!r} was used for a different "
                            f"write to session {key!r}"
                        )
                    return WriteResult(prior.version, prior.message_count, replayed=True)
            session = self._load(sid, fresh=fresh)
            actual = session.version if session else 0
            if expected_version is not None and expected_version != actual:
                if not fresh:
                    fresh = True
                    continue
                raise VersionConflict(key, expected_version, actual)
            if session is None:
                if not create:
                    raise SessionNotFound(tenant, key)
                session = Session(tenant=tenant, key=key, **audit)
            first_message_id = session.next_message_id
            removed: tuple[ChatMessage, ...] = command(session, audit) or ()
            batch = WriteBatch(
                session_id=sid,
                tenant=tenant,
                key=key,
                events=tuple(session.pending_events),
                first_message_id=first_message_id,
                message_count=session.message_count,
                archived_count=session.archived_count,
                next_message_id=session.next_message_id,
                counts=counts,
                bodies=bodies,
            )
            try:
                self._save(session, batch)
            except IntegrityError:
                fresh = True
                if expected_version is not None:
                    head = self.views.session_head(sid)
                    raise VersionConflict(
                        key, expected_version, head.version if head else 0
                    ) from None
                time.sleep(_RETRY_JITTER.uniform(0, 0.002 * min(attempt + 1, 10)))
                continue
            return WriteResult(session.version, session.message_count, removed=removed)
        raise LedgerError(
            f"session {key!r}: write lost the race {self.write_retries} times; try again"
        )

    def _append_rows(
        self,
        key: str,
        dicts: list[dict[str, Any]],
        counts: Sequence[TokenCount],
        bodies: tuple[str, ...],
        *,
        tenant: str | None = None,
        actor: str | None = None,
        reason: str | None = None,
        expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult | None:
        """An append to a session this process holds, stored by the store's own short
        path (`AppendsRows`): the same event and record as `_write` (its session's
        `append` and the mapper) and the same rows (a test compares them), without the
        write batch and `view_changes`. None, having stored nothing, where `_write` must
        do it: an idempotency key, a session not cached or whose chain head the store
        does not hold, an expected version other than the cached one, or another writer
        first."""
        appender, cache = self._appender, self.repository.cache
        if appender is None or cache is None or idempotency_key is not None:
            return None
        sid = self._session_id(key, tenant)
        _check_write_options(actor, reason, expected_version, idempotency_key)
        try:
            cached = cast(Session, cache.get(sid))
        except KeyError:
            return None
        if expected_version is not None and expected_version != cached.version:
            return None
        if not appender.holds_head(sid, cached.version):
            return None
        session = cached.copy()
        first_message_id = session.next_message_id
        actor = actor or self.default_actor
        session.append(dicts, actor=actor, reason=reason, idempotency_key=None,
                       request_digest=None)  # fmt: skip
        (event,) = session.collect_events()
        append = Append(
            event=event,
            first_message_id=first_message_id,
            messages=[
                (d["role"], c, stored_body(d, b))
                for d, c, b in zip(dicts, counts, bodies, strict=True)
            ],
            message_count=session.message_count,
            next_message_id=session.next_message_id,
            archived_count=session.archived_count,
        )
        try:
            if not appender.append_rows(self.mapper.to_stored_event(event, bodies), append):
                return None
        except IntegrityError:  # another writer took the version: the cached state is behind
            with contextlib.suppress(KeyError):
                cache.get(sid, evict=True)
            return None
        cache.put(sid, session)
        self._snapshot_if_due(session, 1)
        return WriteResult(session.version, session.message_count)

    def _save(self, session: Session, batch: WriteBatch) -> None:
        # Application.save and _record, minus their runtime checks of every argument, the
        # notification records nothing reads, and the notify hooks nothing uses: a put's
        # time is mostly Python, and this path is taken by every write.
        events = session.collect_events()
        self.recorder.insert_events(
            [self.mapper.to_stored_event(e, batch.bodies) for e in events], ledger_batch=batch
        )
        if self.repository.cache is not None:
            self.repository.cache.put(session.id, session)
        self._snapshot_if_due(session, len(events))

    def _take_snapshots(self, processing_event: ProcessingEvent[uuid.UUID]) -> None:
        for aggregate in processing_event.aggregates.values():
            self._snapshot_if_due(aggregate, len(processing_event.events))

    def _snapshot_if_due(self, aggregate: Any, new_events: int) -> None:
        # Snapshot the state just saved, instead of the library's default of reading the
        # stream back to the event's version: a snapshot costs no reads.
        interval = self.snapshotting_intervals.get(type(aggregate))
        if self.snapshots is None or not interval:
            return
        # Due when a multiple of the interval is among the versions just saved.
        if aggregate.version // interval > (aggregate.version - new_events) // interval:
            self.snapshots.put([Session.Snapshot.take(aggregate)])

    def _load(self, sid: uuid.UUID, *, fresh: bool) -> Session | None:
        """The session's write state: cached without a read (a stale copy fails to save and
        is then reloaded), or from the latest snapshot and the events after it."""
        cache = self.repository.cache
        if cache is not None:
            try:
                cached = cache.get(sid, evict=fresh)
            except KeyError:
                pass
            else:
                if not fresh:
                    return cast(Session, cached).copy()
        try:
            session: Session = self.repository.get(sid)
        except AggregateNotFoundError:
            return None
        return session

    def _parse_messages(
        self, messages: Iterable[ChatMessage | Mapping[str, Any]], *, allow_empty: bool
    ) -> tuple[list[ChatMessage], list[dict[str, Any]], tuple[str, ...]]:
        """The messages, their dicts (the event's payload) and their canonical JSON (the
        views' rows), each checked against the size limits."""
        if isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable):
            raise InvalidInput("messages must be a list of messages")
        parsed = [ChatMessage.parse(m) for m in messages]
        if not parsed and not allow_empty:
            raise InvalidInput("at least one message is required")
        if len(parsed) > self.limits.max_messages_per_write:
            raise PayloadTooLarge(
                f"{len(parsed)} messages in one write; the limit is "
                f"{self.limits.max_messages_per_write}"
            )
        dicts, bodies, total = [], [], 0
        for i, m in enumerate(parsed):
            encoded = m.to_json()
            bodies.append(encoded)
            size = len(encoded.encode("utf-8"))
            if size > self.limits.max_message_bytes:
                raise PayloadTooLarge(
                    f"message {i} is {size} bytes; the limit is {self.limits.max_message_bytes}"
                )
            total += size
            dicts.append(
                {"role": m.role, "blocks": list(m.blocks), "additional_kwargs": m.additional_kwargs}
            )
        if total > self.limits.max_write_bytes:
            raise PayloadTooLarge(
                f"the write is {total} bytes; the limit is {self.limits.max_write_bytes}"
            )
        return parsed, dicts, tuple(bodies)

    # -- reads ----------------------------------------------------------------------------

    def get(
        self,
        key: str,
        *,
        tenant: str | None = None,
        token_limit: int | None = None,
        initial_token_count: int = 0,
        tokenizer: NamedTokenizer | Callable[[str], Any] | None = None,
        as_of_version: int | None = None,
        as_of: datetime | None = None,
    ) -> list[ChatMessage]:
        """The context window: the newest messages that fit `token_limit` (ChatMemoryBuffer.get),
        now or as the agent would have been given it at `as_of_version` / `as_of`."""
        window = self._window(
            key, tenant, token_limit, initial_token_count, tokenizer, as_of_version, as_of
        )
        return ChatMessage.many_from_bodies(window)

    def get_json(
        self,
        key: str,
        *,
        tenant: str | None = None,
        token_limit: int | None = None,
        initial_token_count: int = 0,
        tokenizer: NamedTokenizer | Callable[[str], Any] | None = None,
        as_of_version: int | None = None,
        as_of: datetime | None = None,
    ) -> list[str]:
        """`get`, each message as its canonical JSON (what `to_json()` gives), made from
        what is stored without decoding it: a server passes them on as they are."""
        window = self._window(
            key, tenant, token_limit, initial_token_count, tokenizer, as_of_version, as_of
        )
        return [body_json(role, body) for role, body in window]

    def _window(
        self,
        key: str,
        tenant: str | None,
        token_limit: int | None,
        initial_token_count: int,
        tokenizer: NamedTokenizer | Callable[[str], Any] | None,
        as_of_version: int | None,
        as_of: datetime | None,
    ) -> list[tuple[str, str]]:
        limit = self.token_limit if token_limit is None else token_limit
        _check_int("token_limit", limit)
        _check_int("initial_token_count", initial_token_count)
        check_window_arguments(limit, initial_token_count)
        if tokenizer is not None and not isinstance(tokenizer, NamedTokenizer):
            tokenizer = NamedTokenizer("caller", tokenizer)
        if tokenizer is not None and tokenizer.name == self.tokenizer.name:
            tokenizer = None  # the stored counts are this tokenizer's
        sid = self._session_id(key, tenant)
        version = self._version(sid, key, tenant, as_of_version, as_of)
        return self.views.context_window_bodies(sid, limit, initial_token_count, tokenizer, version)

    def get_all(
        self,
        key: str,
        *,
        tenant: str | None = None,
        status: str = ACTIVE,
        offset: int = 0,
        limit: int | None = None,
        as_of_version: int | None = None,
        as_of: datetime | None = None,
    ) -> list[ChatMessage]:
        """The whole history in order (or a page of it); `status="archived"` for the archive;
        as it stood at `as_of_version` or at time `as_of` when given."""
        return ChatMessage.many_from_bodies(
            self._history(key, tenant, status, offset, limit, as_of_version, as_of)
        )

    def get_all_json(
        self,
        key: str,
        *,
        tenant: str | None = None,
        status: str = ACTIVE,
        offset: int = 0,
        limit: int | None = None,
        as_of_version: int | None = None,
        as_of: datetime | None = None,
    ) -> list[str]:
        """`get_all`, each message as its canonical JSON (see `get_json`)."""
        rows = self._history(key, tenant, status, offset, limit, as_of_version, as_of)
        return [body_json(row[0], row[1]) for row in rows]

    def _history(
        self,
        key: str,
        tenant: str | None,
        status: str,
        offset: int,
        limit: int | None,
        as_of_version: int | None,
        as_of: datetime | None,
    ) -> list[tuple[Any, ...]]:
        if status not in STATUSES:
            raise InvalidInput(f"status must be one of {', '.join(STATUSES)}; got {status!r}")
        _check_int("offset", offset, least=0)
        if limit is not None:
            _check_int("limit", limit, least=0)
        sid = self._session_id(key, tenant)
        version = self._version(sid, key, tenant, as_of_version, as_of)
        return self.views.history_bodies(sid, status, offset, limit, version)

    def audit(
        self, key: str, *, tenant: str | None = None, after_version: int = 0, limit: int = 100
    ) -> list[AuditEntry]:
        """The session's events after `after_version`, oldest first: who changed what, when."""
        _check_int("after_version", after_version, least=0)
        if not 1 <= _check_int("limit", limit) <= 1000:
            raise InvalidInput(f"limit must be between 1 and 1000; got {limit!r}")
        sid = self._session_id(key, tenant)
        if self.views.session_head(sid) is None:
            raise SessionNotFound(self._tenant(tenant), key)
        events = self.events.get(sid, gt=after_version or None, limit=limit)
        return [self._audit_entry(sid, e) for e in events]

    def _audit_entry(self, sid: uuid.UUID, event: Any) -> AuditEntry:
        changes: dict[str, Any]
        if isinstance(event, SessionStarted):
            changes = {"tenant": event.tenant, "key": event.key}
        elif isinstance(event, MessagesAppended):
            changes = {"added": event.messages}
        elif isinstance(event, HistoryReplaced):
            ended = self.views.ended_at(sid, event.originator_version)
            changes = {
                "kept": event.kept,
                "removed": [m.to_dict() for status, m in ended if status == ACTIVE],
                "added": event.messages[event.kept :],
            }
        elif isinstance(event, HistoryCleared):
            ended = self.views.ended_at(sid, event.originator_version)
            changes = {
                "cleared": sum(status == ACTIVE for status, _ in ended),
                "cleared_archived": sum(status != ACTIVE for status, _ in ended),
            }
        elif isinstance(event, MessageRemoved):
            changes = {"position": event.position, "message_id": event.message_id,
                       "removed": event.message}  # fmt: skip
        else:
            changes = {"archived": event.count}
        return AuditEntry(
            version=event.originator_version,
            event_type=type(event).__name__,
            recorded_at=event.timestamp,
            actor=event.actor,
            reason=event.reason,
            idempotency_key=event.idempotency_key,
            changes=changes,
        )

    def _version(
        self,
        sid: uuid.UUID,
        key: str,
        tenant: str | None,
        as_of_version: int | None,
        as_of: datetime | None,
    ) -> int | None:
        """The version a point-in-time read names (None: now); StateNotFound if none."""
        if as_of_version is None and as_of is None:
            return None
        if as_of_version is not None and as_of is not None:
            raise InvalidInput("give as_of_version or as_of, not both")
        head = self.views.session_head(sid)
        if head is None:
            raise SessionNotFound(self._tenant(tenant), key)
        if as_of is not None:
            if not isinstance(as_of, datetime):
                raise InvalidInput(f"as_of must be a datetime; got {as_of!r}")
            when = as_of if as_of.tzinfo is not None else as_of.replace(tzinfo=UTC)
            version = self.views.version_at(sid, when)
            if version is None:
                raise StateNotFound(
                    f"session {key!r} did not exist yet at {when.isoformat()}; it was "
                    f"started at {head.created_at.isoformat()}"
                )
            return version
        return past_version(key, head, as_of_version)

    def head(
        self,
        key: str,
        *,
        tenant: str | None = None,
        as_of_version: int | None = None,
        as_of: datetime | None = None,
    ) -> SessionHead:
        """The session's version, counts and times (as they stood at `as_of_version` or
        `as_of` when given); SessionNotFound if it has none."""
        sid = self._session_id(key, tenant)
        found = self.views.session_head(sid, self._version(sid, key, tenant, as_of_version, as_of))
        if found is None:
            raise SessionNotFound(self._tenant(tenant), key)
        return found

    def keys(
        self,
        *,
        tenant: str | None = None,
        prefix: str = "",
        after: str | None = None,
        limit: int = 100,
        exclude_cleared: bool = False,
    ) -> list[str]:
        """Session keys of a tenant in order, from after `after`, starting with `prefix`;
        `exclude_cleared`: not those whose last change was a reset (what LlamaIndex's chat
        stores list as keys: a reset deletes the key there)."""
        if not 1 <= _check_int("limit", limit) <= 10_000:
            raise InvalidInput(f"limit must be between 1 and 10000; got {limit!r}")
        _check_text(prefix, "prefix", MAX_KEY_CHARS, allow_empty=True)
        if after is not None:
            _check_key(after)
        return self.views.session_keys(self._tenant(tenant), prefix, after, limit, exclude_cleared)

    def verify(self, key: str, *, tenant: str | None = None) -> ChainReport:
        """Recompute the session's hash chain from its stored events and compare it with
        the hashes stored as they were written; the report names the first version that
        differs. Reads a page of events at a time."""
        sid = self._session_id(key, tenant)
        head = self.views.session_head(sid)
        if head is None:
            raise SessionNotFound(self._tenant(tenant), key)
        tenant, checked, h = head.tenant, 0, GENESIS
        good = h  # h of the last version that checked out

        def report(bad: int | None = None, problem: str | None = None) -> ChainReport:
            return ChainReport(tenant, key, checked, good.hex() if checked else None, bad, problem)

        while True:
            records = self.recorder.select_events(sid, gt=checked or None, limit=VERIFY_PAGE)
            stored = dict(self.views.stored_chain(sid, checked, VERIFY_PAGE))
            for record in records:
                v = record.originator_version
                if v != checked + 1:
                    return report(checked + 1, f"the event of version {checked + 1} is missing")
                h = chain_step(h, sid, v, record.topic, record.state)
                if v not in stored:
                    return report(v, f"version {v} has no row in the timeline")
                kept = stored[v]
                if kept is None:
                    return report(v, f"version {v} has no stored hash (run rebuild)")
                if kept != h:
                    return report(v, f"version {v}: the stored hash is {kept.hex()}, "
                                     f"the events give {h.hex()}")  # fmt: skip
                checked, good = v, h
            if len(records) < VERIFY_PAGE:
                break
        if checked < head.version:  # (writes made while verifying may add versions)
            return report(checked + 1, f"the events end at version {checked}; the session "
                                       f"says {head.version}")  # fmt: skip
        return report()

    def verify_all(self) -> Iterator[ChainReport]:
        """`verify` of every session of every tenant, in (tenant, key) order."""
        after: tuple[str, str] | None = None
        while page := self.views.all_sessions(after, 1000):
            for tenant, key in page:
                yield self.verify(key, tenant=tenant)
            after = page[-1]

    def _session_id(self, key: str, tenant: str | None) -> uuid.UUID:
        return session_id(self._tenant(tenant), _check_key(key))

    def _tenant(self, tenant: str | None) -> str:
        return self.default_tenant if tenant is None else _check_tenant(tenant)

    aput = _async_twin(put)
    aput_messages = _async_twin(put_messages)
    aset = _async_twin(set)
    areset = _async_twin(reset)
    adelete_message = _async_twin(delete_message)
    adelete_last_message = _async_twin(delete_last_message)
    aarchive_oldest = _async_twin(archive_oldest)
    aaudit = _async_twin(audit)
    averify = _async_twin(verify)
    aget = _async_twin(get)
    aget_all = _async_twin(get_all)
    ahead = _async_twin(head)
    akeys = _async_twin(keys)


def _check_int(name: str, value: object, *, least: int | None = None) -> int:
    """`value`, if it is an int (not a bool, which Python counts as one) of at least
    `least`; InvalidInput naming `name` otherwise."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or (least is not None and value < least)
    ):
        kind = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}
        wanted = kind.get(least, f"an integer of at least {least}")
        raise InvalidInput(f"{name} must be {wanted}; got {value!r}")
    return value


def _messages(count: int) -> str:
    return "1 message" if count == 1 else f"{count} messages"


def _common_prefix(old: list[ChatMessage], new: list[ChatMessage]) -> int:
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        if a != b:
            return i
    return min(len(old), len(new))


def _digest(op: str, request: dict[str, Any]) -> str:
    canonical = json.dumps({"op": op, **request}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()


def _check_text(
    value: object,
    what: str,
    max_chars: int,
    *,
    error: type[InvalidInput] = InvalidInput,
    allow_empty: bool = False,
    allow_controls: bool = False,
) -> str:
    if not isinstance(value, str) or not (value or allow_empty):
        raise error(f"{what} must be a {'' if allow_empty else 'non-empty '}string")
    if len(value) > max_chars:
        raise error(f"{what} is {len(value)} characters; the limit is {max_chars}")
    if not allow_controls and _CONTROLS.search(value):
        raise error(f"{what} must not contain control characters")
    if "\x00" in value:  # PostgreSQL's text columns refuse it: refused on every store
        raise error(f"{what} must not contain NUL (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} contains a lone surrogate; it must be valid Unicode") from None
    return value


def _check_key(key: object) -> str:
    return _check_text(key, "session key", MAX_KEY_CHARS, error=InvalidSessionKey)


def _check_tenant(tenant: object) -> str:
    return _check_text(tenant, "tenant", MAX_TENANT_CHARS, error=InvalidSessionKey)


def _check_write_options(
    actor: object, reason: object, expected_version: object, idempotency_key: object
) -> None:
    if actor is not None:
        _check_text(actor, "actor", MAX_ACTOR_CHARS)
    if reason is not None:
        _check_text(reason, "reason", MAX_REASON_CHARS, allow_controls=True)
    if expected_version is not None:
        _check_int("expected_version", expected_version, least=0)
    if idempotency_key is not None:
        _check_text(idempotency_key, "idempotency key", MAX_IDEMPOTENCY_KEY_CHARS)


__all__ = ["AuditEntry", "Ledger", "Limits", "SessionHead", "WriteResult"]
