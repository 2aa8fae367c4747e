"""The one write loop of every command: load the session's state, run the command, store
its events and their view rows in one transaction, settle what is unknown.

Each attempt of a write takes four steps (docs/design.md, "The write path"):

1. load: the session's O(1) state, by the load strategy the retry policy names (`Load`):
   NEW takes a session that is not cached to be new (no read: a write that may create
   it, unless content is sealed or the key may not start a session); CACHED takes the
   repository's cached copy, or the latest snapshot and the events after it; FRESH takes
   the cached copy caught up with the events written since, or reads as CACHED.
2. run the command on that state; its events and a `WriteBatch` of their view rows
   are what the attempt stores.
3. store: the library's `EventStore.put`, whose keyword arguments reach the recorder's
   hook: the events and their view rows in one transaction.
4. settle: a write refused by the store may be stored all the same (its answer was lost
   around COMMIT, or a request sent with its key wrote it before or meanwhile): the views
   are asked whether its write id committed, never written again. Otherwise the retry
   policy says what the next attempt loads: a guess that the session was new, or a copy
   from the cache, that lost to a write made since goes again at once on FRESH state; a
   fresh copy that lost to a racing writer backs off first; a stale `expected_version`
   is refused.

A keyed write is not looked up before it goes (a look-up a write; on PostgreSQL, a round
trip): stored already, it is refused, by the key's unique index or before it is stored
(its session moved on, erased, or refusing its command now), and each refusal asks
whether the key's write is stored.

Every write has a write id: the caller's idempotency key, or one made here.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
import functools
import os
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any, cast

from eventsourcing.application import AggregateNotFoundError, Repository, project_aggregate
from eventsourcing.persistence import EventStore, IntegrityError, InterfaceError, OperationalError

from .addresses import SessionAddresses
from .erasure import Erasures
from .errors import (
    EncryptionRequired,
    HoldConflict,
    HoldNotFound,
    IdempotencyKeyReused,
    LedgerError,
    LegalHold,
    MessageNotFound,
    SessionNotFound,
    StreamConflict,
    VersionConflict,
)
from .inputs import check_key, check_write_options, new_key_refusal, request_digest
from .messages import ChatMessage
from .observer import SILENT, WRITE
from .ports import OutcomeUnknown, PriorWrite, SessionViews, WriteBatch, WriteResult
from .session import Session, session_id
from .tokens import TokenCount
from .tuning import Tuning

Command = Callable[[Session, dict[str, Any]], Any]
# The back-off of a write that lost a race draws from its own generator: a library that
# drew from the module's would move the application's seeded `random` stream.
_RETRY_JITTER = random.Random()


class Load(enum.Enum):
    """How an attempt loads the session's state."""

    NEW = "new"  # not cached: taken to be new, with no read
    CACHED = "cached"  # the cached copy, else the latest snapshot and the events after it
    FRESH = "fresh"  # the cached copy caught up with the events since, else as CACHED


# Module names of the members: each put looks them up, and on Python 3.11 an Enum member
# looked up on its class costs several times a global's.
NEW, CACHED, FRESH = Load.NEW, Load.CACHED, Load.FRESH
# A command's refusals for what the session holds, which a cached copy may hold no more
# (EncryptionRequired: an erasure's, of a copy from before another process erased it,
# whose data key that erasure destroyed)
STATE_REFUSALS = (
    MessageNotFound, StreamConflict, HoldConflict, HoldNotFound, LegalHold, EncryptionRequired,
)  # fmt: skip


class RetryPolicy:
    """Where a write's attempts stand: the load strategy of its next attempt, and how many
    attempts it has in all. A write starts on NEW (when it may guess) or CACHED state, and
    goes to FRESH once its state may be behind another process's writes; a failed guess
    is not a lost race, so a write that may guess has one attempt more than `retries`.

    Immutable: the write loop holds the two states a write starts from (a write that went
    well made no object of its own) and a write moves on to the state a method returns."""

    __slots__ = ("attempts", "load")

    def __init__(self, load: Load, attempts: int) -> None:
        self.load, self.attempts = load, attempts

    def reload(self) -> RetryPolicy:
        """The state read may be behind: the next attempt loads it FRESH, at once."""
        return RetryPolicy(FRESH, self.attempts)

    def lost_race(self, attempt: int) -> RetryPolicy:
        """The session's next version was taken at `attempt` (0 the first): FRESH state
        next, after a short random back-off if this attempt's state was FRESH already (a
        writer racing this one)."""
        if self.load is FRESH:
            time.sleep(_RETRY_JITTER.uniform(0, 0.002 * min(attempt + 1, 10)))
        return self.reload()


class WriteLoop:
    """Runs a command on a session and stores its events: load, run, store, settle."""

    def __init__(
        self, views: SessionViews, events: EventStore[uuid.UUID],
        snapshots: EventStore[uuid.UUID] | None, repository: Repository[uuid.UUID],
        tuning: Tuning, addresses: SessionAddresses, erasures: Erasures, *,
        default_actor: str, retries: int, snapshot_interval: int,
    ) -> None:  # fmt: skip
        # Snapshots are taken by `_snapshot_if_due`, not by the library (which would read
        # the stream back to the version first).
        self._views, self._events, self._snapshots = views, events, snapshots
        self._repository, self._tuning = repository, tuning
        self._addresses, self._erasures = addresses, erasures
        self._default_actor, self._retries = default_actor, retries
        self._snapshot_interval = snapshot_interval
        self._guessing = RetryPolicy(NEW, retries + 1)
        self._loading = RetryPolicy(CACHED, retries)

    def write(
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
        """Run `command` on session `key` (`create`: a new session if it has none) and
        store its events; `op` and `request` name the write for its idempotency key."""
        addresses = self._addresses
        tenant = addresses.default_tenant if tenant is None else addresses.tenant(tenant)
        check_key(key)
        check_write_options(actor, reason, expected_version, idempotency_key)
        sid = session_id(tenant, key)
        # The write id: the caller's key (with the digest of what it asked, so a key
        # reused for another write is refused), or one of our own.
        plain = None if idempotency_key is None else request_digest(op, request)
        digest = None if plain is None else self._views.keyed_digest(plain)  # (as stored)
        # (128 random bits as hex, as a UUID4's: without making the UUID object.)
        write_id = idempotency_key or f"w-{os.urandom(16).hex()}"
        audit: dict[str, Any] = {
            "actor": actor or self._default_actor,
            "reason": reason,
            "idempotency_key": write_id,
            "request_digest": digest,
        }
        views, observer = self._views, self._tuning.observer
        # NEW: no session cached, and the write creates. Not with sealing on: a session's
        # first write makes its data key in a transaction of its own, which must not
        # happen for a session that exists, stored clear. Nor for a key no new session
        # may take: a stored one with it must be found.
        refused_if_new = new_key_refusal(key) if create else None
        guess_new = (create and expected_version in (None, 0) and not views.can_seal()
                     and refused_if_new is None)  # fmt: skip
        policy = self._guessing if guess_new else self._loading
        # A keyed write is not looked up before it goes: stored already, it is refused
        # (the key's unique index; its session moved on; what the session now holds),
        # and each refusal asks whether the key's write is stored (`_stored_before`).
        stored_before = functools.partial(
            self._stored_before, sid, op, write_id, plain, idempotency_key, key
        )
        for attempt in range(policy.attempts):
            # 1. load
            load = policy.load
            session = self._cached(sid) if load is not FRESH else None
            guessed = session is None and load is NEW and self._repository.cache is not None
            if session is None and not guessed:
                session = self._load(sid, fresh=load is FRESH)
            if session is not None and session.erased:
                if (first := stored_before()) is not None:  # (an erasure's retry)
                    return first
                raise self._erasures.error(sid, key) or LedgerError(f"session {key!r} was erased")
            actual = session.version if session else 0
            if expected_version is not None and expected_version != actual:
                if policy.load is not FRESH:
                    policy = policy.reload()
                    continue
                if (first := stored_before()) is not None:
                    return first
                observer.version_conflict()
                raise VersionConflict(key, expected_version, actual)
            if session is None:
                if not create:
                    raise SessionNotFound(tenant, key)
                if refused_if_new is not None:
                    raise refused_if_new
                session = Session(tenant=tenant, key=key, **audit)
            # 2. run the command
            first_message_id = session.next_message_id
            try:
                removed: tuple[ChatMessage, ...] = command(session, audit) or ()
            except STATE_REFUSALS:
                # Refused for what the session holds: believed only of state read fresh
                # (a cached copy misses what other processes wrote since: a message, a
                # stream they opened, a hold they released, an erasure).
                if policy.load is not FRESH and attempt + 1 < policy.attempts:
                    policy = policy.reload()
                    continue
                if (first := stored_before()) is not None:
                    return first
                raise
            # (by position: a named tuple's keywords are a dict made and unpacked per write)
            batch = WriteBatch(
                sid, tenant, key, tuple(session.collect_events()), first_message_id,
                session.message_count, session.archived_count, session.next_message_id,
                counts, texts,
            )  # fmt: skip
            # 3. store
            try:
                # Straight to the event store (the library's public `EventStore.put`):
                # `Application.save` only adds, per object saved, runtime `Protocol`
                # checks that cost 12% of a put's instructions on Python 3.11; the
                # state saved is cached and snapshotted below, as `save` would.
                with observer.store_call(WRITE):
                    self._events.put(batch.events, ledger_batch=batch)
            except (IntegrityError, OperationalError, InterfaceError) as error:
                # 4. settle: the write may be stored all the same; else the policy says
                # what the next attempt loads (this raises again while the store stays
                # unreachable, or the write may not go again).
                done = self._settled(sid, write_id, batch, error, keyed=idempotency_key is not None)
                if done is not None and idempotency_key is not None:
                    # This attempt's commit whose answer was lost, or the same request's
                    # other attempt (a retry sent meanwhile), which won: answered as a
                    # retry is, with what is stored (replayed unless it may be this one's).
                    replay = self._replayed(sid, op, done, plain, idempotency_key, key)
                    return dataclasses.replace(replay, replayed=_refused(error))
                if done is not None:  # (this write's own id: its commit's answer was lost)
                    return WriteResult(done.version, done.message_count, removed=removed)
                if guessed and expected_version is None:
                    policy = policy.reload()  # not a race: the session was older than this cache
                    continue
                if expected_version is not None:
                    observer.version_conflict()
                    head = views.session_head(sid)
                    raise VersionConflict(
                        key, expected_version, head.version if head else 0
                    ) from None
                observer.write_retried()
                policy = policy.lost_race(attempt)
                continue
            if observer is not SILENT:  # (no list of names made for no one)
                observer.events_written([type(event).__name__ for event in batch.events])
            result = WriteResult(session.version, session.message_count, removed=removed)
            self._snapshot_if_due(session, len(batch.events))
            cache = self._repository.cache
            if cache is not None:
                # The session itself, which this write reads no more: what the cache holds
                # is the cache's alone (a write takes a copy of it, `_cached`; a writer
                # whose copy proves stale takes it out and catches it up in place).
                cache.put(sid, session)
            return result
        raise LedgerError(f"session {key!r}: write lost the race {self._retries} times; try again")

    def _settled(
        self, sid: uuid.UUID, write_id: str, batch: WriteBatch, error: Exception, *, keyed: bool
    ) -> PriorWrite | None:
        """The write, if the store holds it although it refused it; None if it does not
        and the write may go again (another writer took its version); else `error`."""
        # Another writer took the version; or this write committed and its answer was
        # lost (the connection dropped around COMMIT, or the store's retry then met its
        # own row): ask whether its id committed, unless nothing of it can be stored.
        if _may_be_stored(error, keyed=keyed):
            # (A caller's key is looked up by its index, at any version: the request
            # may have been stored long before this attempt's version.)
            since = None if keyed else batch.events[0].originator_version
            done = self._views.prior_write(sid, write_id, since=since)
            if done is not None:
                return done
        if not isinstance(error, IntegrityError):
            raise error
        return None

    def _stored_before(
        self, sid: uuid.UUID, op: str, write_id: str, plain: str | None,
        idempotency_key: str | None, key: str,
    ) -> WriteResult | None:  # fmt: skip
        """A keyed write about to be refused: the first answer, if it is refused because
        it is stored already (a retry); None if it is not, or has no key."""
        if idempotency_key is None:
            return None
        prior = self._views.prior_write(sid, write_id)
        if prior is None:
            return None
        return self._replayed(sid, op, prior, plain, idempotency_key, key)

    def _replayed(
        self, sid: uuid.UUID, op: str, prior: PriorWrite, plain: str | None,
        idempotency_key: str, key: str,
    ) -> WriteResult:  # fmt: skip
        """The answer to a write whose key names `prior`, stored already: the first answer
        (the message a removal removed included), or IdempotencyKeyReused if `prior` was
        another request. A session erased since answers every write but its erasure's
        retry with its erasure, as any write to it: a replay for the same request and a
        refusal for another would confirm guesses of the erased content."""
        if op != "erase":
            erased = self._erasures.error(sid, key)
            if erased is not None:
                raise erased
        if plain is None or not self._views.same_request(prior.request_digest, plain):
            raise IdempotencyKeyReused(
                f"idempotency key {idempotency_key!r} was used for a different write to "
                f"session {key!r}"
            )
        removed: tuple[ChatMessage, ...] = ()
        if op == "remove":  # one event, the write's last: the message it removed is in it
            last = self._events.get(sid, gt=prior.version - 1, lte=prior.version)
            removed = tuple(ChatMessage.from_valid(e.message) for e in last
                            if isinstance(e, Session.MessageRemoved))  # fmt: skip
        return WriteResult(prior.version, prior.message_count, replayed=True, removed=removed)

    def _snapshot_if_due(self, session: Session, new_events: int) -> None:
        """A snapshot of the state just saved, when a multiple of the interval is among the
        versions it reached. A snapshot only saves reads: one that fails (the store gone
        after the write committed) is skipped, never reported as the write's failure."""
        version, interval = session.version, self._snapshot_interval
        if self._snapshots is None or version // interval <= (version - new_events) // interval:
            return
        with contextlib.suppress(IntegrityError, OperationalError, InterfaceError):
            self._snapshots.put([Session.Snapshot.take(session)])

    def _cached(self, sid: uuid.UUID) -> Session | None:
        """A copy of the cached session, or None (none cached, or no cache: nothing can
        then be told from it, and the session is loaded). One look-up of the cache, and
        a copy a command may change (`Session.copy`, not the library's `deepcopy`)."""
        cache = self._repository.cache
        if cache is None:
            return None
        try:
            cached = cast(Session, cache.get(sid))
        except KeyError:
            return None
        return cached.copy()

    def _load(self, sid: uuid.UUID, *, fresh: bool) -> Session | None:
        """The session's write state when it is not taken from the cache (`_cached`): the
        cached copy caught up with the events written since (`fresh`), or from the latest
        snapshot and the events after it."""
        # (The library's cache is typed for any aggregate; this one holds Sessions.)
        cache = self._repository.cache
        if fresh and cache is not None:
            try:
                stale = cast(Session, cache.get(sid, evict=True))
            except KeyError:
                pass
            else:  # (evicted: the cache held the only reference, so it is this write's)
                newer = self._events.get(sid, gt=stale.version)
                caught_up: Session | None = project_aggregate(stale, newer)
                if caught_up is not None:
                    return caught_up
        try:
            session: Session = self._repository.get(sid)
        except AggregateNotFoundError:
            return None
        return session


def _may_be_stored(error: Exception, *, keyed: bool) -> bool:
    """Whether a write that failed with `error` may be stored all the same, so that its id
    must be looked for: its answer was lost (a connection error, or OutcomeUnknown), or
    it has a caller's key, which a request sent again may have written meanwhile. An
    unkeyed write refused on the store's first try (another writer took its version; a
    session cached here and written by another process since) stored nothing."""
    return keyed or not isinstance(error, IntegrityError) or isinstance(error, OutcomeUnknown)


def _refused(error: Exception) -> bool:
    """Whether the store surely stored nothing of the write that failed with `error`."""
    return isinstance(error, IntegrityError) and not isinstance(error, OutcomeUnknown)
