"""The one write loop of every command: load the session's state, run the command, store
its events and their view rows in one transaction, settle what is unknown.

A write loads the session's O(1) state: the repository's cache; on a miss, a snapshot
and the events after it, or nothing at all for a write that may create the session
(unless content is sealed): it is taken to be new, and if it was not, its version 1
is taken and the write runs again on the stored state, as for a stale copy. It runs a
command on that state, and hands its events and a `WriteBatch` to the library's event
store (`EventStore.put`, whose keyword arguments reach the recorder's hook): the
recorder stores the events and their view rows in one transaction. A cached copy made
stale by another process fails on the events' primary key; the write is then retried
on fresh state, unless it names a stale `expected_version`.

Every write has a write id: the caller's idempotency key, or one made here. A write
whose outcome is unknown (the connection lost around COMMIT, or a retry that finds its
own version taken) is settled by asking the views whether that id committed, never by
writing again.
"""

from __future__ import annotations

import contextlib
import random
import time
import uuid
from collections.abc import Callable, Sequence
from typing import Any

from eventsourcing.application import AggregateNotFoundError, project_aggregate
from eventsourcing.persistence import IntegrityError, InterfaceError, OperationalError

from .addresses import SessionAddresses
from .erasure import Erasures
from .errors import (
    IdempotencyKeyReused,
    LedgerError,
    SessionNotFound,
    VersionConflict,
)
from .inputs import check_key, check_write_options, new_key_refusal, request_digest
from .messages import ChatMessage
from .observer import WRITE, LedgerObserver
from .ports import OutcomeUnknown, PriorWrite, SessionViews, WriteBatch, WriteResult
from .session import Session, session_id
from .tokens import TokenCount

Command = Callable[[Session, dict[str, Any]], Any]
# The back-off of a write that lost a race draws from its own generator: a library that
# drew from the module's would move the application's seeded `random` stream.
_RETRY_JITTER = random.Random()


class WriteLoop:
    """`_write`, mixed into the Ledger (an eventsourcing Application, which supplies
    `events`, `snapshots` and `repository`; the Ledger sets the rest)."""

    views: SessionViews
    observer: LedgerObserver
    default_actor: str
    write_retries: int
    snapshot_interval: int
    events: Any
    snapshots: Any
    repository: Any
    _erasures: Erasures
    _addresses: SessionAddresses

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
        tenant = self._addresses.tenant(tenant)
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
        # A new session is known from the cache alone: none cached, and the write creates.
        # Not with sealing on: a session's first write makes its data key in a transaction
        # of its own, which must not happen for a session that exists, stored clear.
        refused_if_new = new_key_refusal(key) if create else None
        # Nor for a key no new session may take: a stored one with it must be found.
        guess_new = (create and expected_version in (None, 0) and not self.views.can_seal()
                     and refused_if_new is None)  # fmt: skip
        # (A failed guess is not a lost race: it does not use up one of the attempts.)
        for attempt in range(self.write_retries + guess_new):
            if idempotency_key is not None:
                prior = self.views.prior_write(sid, write_id)
                if prior is not None:
                    return _replayed(prior, digest, idempotency_key, key)
            guessed = guess_new and not fresh and not self._cached(sid)
            session = None if guessed else self._load(sid, fresh=fresh)
            if session is not None and session.erased:
                raise self._erasures.error(sid, key) or LedgerError(f"session {key!r} was erased")
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
                if refused_if_new is not None:
                    raise refused_if_new
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
                # was lost (the connection dropped around COMMIT, or the store's retry
                # then met its own row): ask whether its id committed (this raises again
                # while the store stays unreachable), unless nothing of it can be stored.
                if _may_be_stored(error, keyed=idempotency_key is not None):
                    done = self.views.prior_write(sid, write_id, since=since)
                    if done is not None:
                        return WriteResult(done.version, done.message_count, removed=removed)
                if not isinstance(error, IntegrityError):
                    raise
                # A copy from the cache lost to a write made since: load and go again at
                # once. A freshly loaded one lost to a writer racing this one: back off.
                raced, fresh = fresh, True
                if guessed and expected_version is None:
                    continue  # not a race: the session was older than this process's cache
                if expected_version is not None:
                    self.observer.version_conflict()
                    head = self.views.session_head(sid)
                    raise VersionConflict(
                        key, expected_version, head.version if head else 0
                    ) from None
                self.observer.write_retried()
                if raced:
                    time.sleep(_RETRY_JITTER.uniform(0, 0.002 * min(attempt + 1, 10)))
                continue
            self.observer.events_written([type(event).__name__ for event in batch.events])
            if self.repository.cache is not None:
                # A copy: what the cache holds is the cache's alone. A writer whose copy
                # proves stale takes it out and catches it up in place (`_load`); had it
                # taken this object, this write could answer with that write's version.
                self.repository.cache.put(sid, session.copy())
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

    def _cached(self, sid: uuid.UUID) -> bool:
        cache = self.repository.cache
        if cache is None:
            return True  # no cache: nothing can be told from it, so always load
        try:
            cache.get(sid)
        except KeyError:
            return False
        return True

    def _load(self, sid: uuid.UUID, *, fresh: bool) -> Session | None:
        """The session's write state: cached without a read (a stale copy fails to save and
        is then caught up with the events written since), or from the latest snapshot and
        the events after it."""
        cache = self.repository.cache
        if fresh and cache is not None:
            try:
                stale: Session = cache.get(sid, evict=True)
            except KeyError:
                pass
            else:  # (evicted: the cache held the only reference, so it is this write's)
                newer = self.events.get(sid, gt=stale.version)
                caught_up: Session | None = project_aggregate(stale, newer)
                if caught_up is not None:
                    return caught_up
        try:
            session: Session = self.repository.get(sid)
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


def _replayed(prior: PriorWrite, digest: str | None, idempotency_key: str, key: str) -> WriteResult:
    if prior.request_digest != digest:
        raise IdempotencyKeyReused(
            f"idempotency key {idempotency_key!r} was used for a different write to session {key!r}"
        )
    return WriteResult(prior.version, prior.message_count, replayed=True)
