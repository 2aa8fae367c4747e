"""The Session aggregate: one conversation's event stream.

Every event records who made the change (`actor`), why (`reason`), and, when the
caller gave one, the idempotency key with the digest of the request it served, so a
retried request is recognised from the events alone.

Its state is O(1) in the number of messages (counts and the next message id), so
snapshots stay tiny and a write never loads the history. Messages live in the events
and in the projections.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from eventsourcing.domain import Aggregate, event

from .errors import StreamConflict

TENANT_NAMESPACE = uuid.UUID("6f0f9d3c-3b49-5c2e-9a57-2f5b8c1d7e40")


@functools.lru_cache(maxsize=4096)
def session_id(tenant: str, key: str) -> uuid.UUID:
    """The stream id of (tenant, key): stable, and distinct across tenants."""
    return uuid.uuid5(_tenant_namespace(tenant), key)


@functools.lru_cache(maxsize=1024)
def _tenant_namespace(tenant: str) -> uuid.UUID:
    return uuid.uuid5(TENANT_NAMESPACE, tenant)


class Session(Aggregate):
    """A conversation's history, as the sequence of changes made to it."""

    # The ids of the open streams: a tuple, which a snapshot keeps (as a JSON list: never
    # changed in place, only replaced). Sessions snapshotted before streams existed have
    # no attribute of their own.
    open_streams: tuple[str, ...] = ()

    class SessionStarted(Aggregate.Created):
        tenant: str
        key: str
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

    def _next(self, event_class: Any, **fields: Any) -> None:
        # Time never runs backwards within a session, even across hosts with skewed
        # clocks, so "the state at time t" is always one version.
        timestamp = max(event_class.create_timestamp(), self.modified_on)
        self.trigger_event(event_class, timestamp=timestamp, **fields)

    def copy(self) -> Session:
        """A copy a command may change without changing this one. Every attribute is
        immutable or empty (pending events are collected before a session is cached), so
        a copy of the attribute dict is a deep copy."""
        clone = object.__new__(Session)
        clone.__dict__.update(self.__dict__)
        clone.__dict__["_pending_events"] = []
        return clone

    def __deepcopy__(self, memo: dict[int, Any]) -> Session:
        return self.copy()

    @staticmethod
    def create_id(tenant: str, key: str, **_: Any) -> uuid.UUID:
        return session_id(tenant, key)

    @event(SessionStarted)
    def __init__(
        self,
        tenant: str,
        key: str,
        actor: str,
        reason: str | None,
        idempotency_key: str | None,
        request_digest: str | None,
    ) -> None:
        self.tenant = tenant
        self.key = key
        self.message_count = 0
        self.archived_count = 0
        self.next_message_id = 0
        self.held = False
        self.erased = False
        self.open_streams: tuple[str, ...] = ()

    # The command events are declared with their own `apply` rather than made by the
    # @event decorator: the decorator's event maps its fields onto the method's
    # parameters again on every write (and every replayed event).

    class MessagesAppended(Aggregate.Event):
        messages: list[dict[str, Any]]
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            added = len(self.messages)
            aggregate.message_count += added
            aggregate.next_message_id += added

    class HistoryReplaced(Aggregate.Event):
        messages: list[dict[str, Any]]
        kept: int
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            # The first `kept` messages equal the current ones and keep their ids: an
            # agent that sets its whole history every turn stores each message once in
            # the views.
            aggregate.message_count = len(self.messages)
            aggregate.next_message_id += len(self.messages) - self.kept

    class HistoryCleared(Aggregate.Event):
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.message_count = 0
            aggregate.archived_count = 0

    class MessageRemoved(Aggregate.Event):
        position: int
        message_id: int
        message: dict[str, Any]
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.message_count -= 1

    class MessagesArchived(Aggregate.Event):
        count: int
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.message_count -= self.count
            aggregate.archived_count += self.count

    class LegalHoldPlaced(Aggregate.Event):
        reference: str
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.held = True

    class LegalHoldReleased(Aggregate.Event):
        reference: str
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.held = False

    class SessionErased(Aggregate.Event):
        """The session's content was made unreadable (its data key destroyed); `reason`
        says why, `basis` on what legal ground. It carries no content itself."""

        basis: str
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.message_count = 0
            aggregate.archived_count = 0
            aggregate.erased = True

    class SessionEncrypted(Aggregate.Event):
        """The content of a session stored clear was sealed under a key of its own
        (`encrypt-existing`): its earlier records were rewritten and their hash chain
        computed again; `previous_head` is the chain's head before (hex), if stored."""

        previous_head: str | None
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

    # A stream: opened, its deltas appended in batches, then completed (its message enters
    # the history) or aborted (the partial stays in the events; a message only if the
    # caller keeps it). The state holds the open streams' ids, never their text.

    class StreamStarted(Aggregate.Event):
        stream_id: str
        role: str
        turn: str | None
        parent: str | None
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.open_streams = (*aggregate.open_streams, self.stream_id)

    class StreamChunksAppended(Aggregate.Event):
        stream_id: str
        deltas: list[str]
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            pass

    class StreamCompleted(Aggregate.Event):
        stream_id: str
        deltas: list[str]  # the last ones, not flushed before
        message: dict[str, Any]  # the assembled message, as MessagesAppended holds one
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.open_streams = _without(aggregate.open_streams, self.stream_id)
            aggregate.message_count += 1
            aggregate.next_message_id += 1

    class StreamAborted(Aggregate.Event):
        stream_id: str
        deltas: list[str]
        cause: str  # client_gone, error, timeout, superseded
        message: dict[str, Any] | None  # the partial, when the caller keeps it as a message
        actor: str
        reason: str | None
        idempotency_key: str | None
        request_digest: str | None

        def apply(self, aggregate: Any) -> None:
            aggregate.open_streams = _without(aggregate.open_streams, self.stream_id)
            if self.message is not None:
                aggregate.message_count += 1
                aggregate.next_message_id += 1

    def start_stream(
        self, stream_id: str, role: str, turn: str | None, parent: str | None, **audit: Any
    ) -> None:
        """Open a stream (its id not used before in this session: the caller checks)."""
        if stream_id in self.open_streams:
            raise StreamConflict(f"stream {stream_id!r} of session {self.key!r} is already open")
        self._next(self.StreamStarted, stream_id=stream_id, role=role, turn=turn, parent=parent,
                   **audit)  # fmt: skip

    def append_chunks(self, stream_id: str, deltas: list[str], **audit: Any) -> None:
        self.check_open(stream_id)
        self._next(self.StreamChunksAppended, stream_id=stream_id, deltas=deltas, **audit)

    def complete_stream(
        self, stream_id: str, deltas: list[str], message: dict[str, Any], **audit: Any
    ) -> None:
        self.check_open(stream_id)
        self._next(self.StreamCompleted, stream_id=stream_id, deltas=deltas, message=message,
                   **audit)  # fmt: skip

    def abort_stream(
        self, stream_id: str, deltas: list[str], cause: str, message: dict[str, Any] | None,
        **audit: Any,
    ) -> None:  # fmt: skip
        self.check_open(stream_id)
        self._next(self.StreamAborted, stream_id=stream_id, deltas=deltas, cause=cause,
                   message=message, **audit)  # fmt: skip

    def check_open(self, stream_id: str) -> None:
        """StreamConflict, naming the stream, unless it is open."""
        if stream_id not in self.open_streams:
            raise StreamConflict(
                f"stream {stream_id!r} of session {self.key!r} is not open (never opened, "
                "or already completed or aborted)"
            )

    def append(self, messages: list[dict[str, Any]], **audit: Any) -> None:
        """Append messages (the audit fields: actor, reason, idempotency_key,
        request_digest)."""
        self._next(self.MessagesAppended, messages=messages, **audit)

    def replace(self, messages: list[dict[str, Any]], kept: int, **audit: Any) -> None:
        """Replace the active history; the first `kept` messages are unchanged."""
        self._next(self.HistoryReplaced, messages=messages, kept=kept, **audit)

    def clear(self, **audit: Any) -> None:
        """Clear the active and the archived history."""
        self._next(self.HistoryCleared, **audit)

    def remove(self, position: int, message_id: int, message: dict[str, Any], **audit: Any) -> None:
        """Remove the active message at `position`."""
        self._next(
            self.MessageRemoved, position=position, message_id=message_id, message=message,
            **audit,
        )  # fmt: skip

    def archive(self, count: int, **audit: Any) -> None:
        """Move the `count` oldest active messages to the archive."""
        self._next(self.MessagesArchived, count=count, **audit)

    def place_hold(self, reference: str, **audit: Any) -> None:
        """Put the session under legal hold: it cannot be erased until released."""
        self._next(self.LegalHoldPlaced, reference=reference, **audit)

    def release_hold(self, reference: str, **audit: Any) -> None:
        """Release the legal hold."""
        self._next(self.LegalHoldReleased, reference=reference, **audit)

    def erase(self, basis: str, **audit: Any) -> None:
        """Record that the session's content was erased."""
        self._next(self.SessionErased, basis=basis, **audit)

    def encrypt(self, previous_head: str | None, **audit: Any) -> None:
        """Record that the session's content, stored clear, is sealed from now on."""
        self._next(self.SessionEncrypted, previous_head=previous_head, **audit)


def _without(ids: Any, stream_id: str) -> tuple[str, ...]:
    return tuple(i for i in ids if i != stream_id)


# Sessions snapshotted before holds and erasure existed have neither attribute.
Session.held = False
Session.erased = False

MessagesAppended = Session.MessagesAppended
HistoryReplaced = Session.HistoryReplaced
HistoryCleared = Session.HistoryCleared
MessageRemoved = Session.MessageRemoved
MessagesArchived = Session.MessagesArchived
SessionStarted = Session.SessionStarted
LegalHoldPlaced = Session.LegalHoldPlaced
LegalHoldReleased = Session.LegalHoldReleased
SessionErased = Session.SessionErased
SessionEncrypted = Session.SessionEncrypted
StreamStarted = Session.StreamStarted
StreamChunksAppended = Session.StreamChunksAppended
StreamCompleted = Session.StreamCompleted
StreamAborted = Session.StreamAborted
STREAM_EVENTS = (StreamStarted, StreamChunksAppended, StreamCompleted, StreamAborted)
