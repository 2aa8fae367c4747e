"""The Session aggregate: one conversation's event stream, its id and its commands.

Its events (session_events.py) record who made each change (`actor`), why (`reason`),
and, when the caller gave one, the idempotency key with the digest of the request it
served, so a retried request is recognised from the events alone.

Its state is O(1) in the number of messages (counts and the next message id), so
snapshots stay tiny and a write never loads the history. Messages live in the events
and in the projections.
"""

from __future__ import annotations

import functools
import uuid
from typing import Any

from eventsourcing.domain import Aggregate, event

from . import session_events as events
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
    # The references of the legal holds held, oldest first (session_events.holds_of reads
    # them, with the one hold of a session snapshotted before there could be several).
    holds: tuple[str, ...] = ()

    # The events, declared in session_events.py; the library redefines each here as
    # Session.<Name>, whose topic every stored event names.
    SessionStarted = events.SessionStarted
    MessagesAppended = events.MessagesAppended
    HistoryReplaced = events.HistoryReplaced
    HistoryCleared = events.HistoryCleared
    MessageRemoved = events.MessageRemoved
    MessagesArchived = events.MessagesArchived
    LegalHoldPlaced = events.LegalHoldPlaced
    LegalHoldReleased = events.LegalHoldReleased
    SessionErased = events.SessionErased
    SessionEncrypted = events.SessionEncrypted
    StreamStarted = events.StreamStarted
    StreamChunksAppended = events.StreamChunksAppended
    StreamCompleted = events.StreamCompleted
    StreamAborted = events.StreamAborted

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
        self.holds: tuple[str, ...] = ()
        self.erased = False
        self.open_streams: tuple[str, ...] = ()

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
        """Put the session under a legal hold (a reference it does not hold yet: the
        caller checks): it cannot be erased until every hold is released."""
        self._next(self.LegalHoldPlaced, reference=reference, **audit)

    def release_hold(self, reference: str, **audit: Any) -> None:
        """Release the hold placed under `reference` (one it holds: the caller checks)."""
        self._next(self.LegalHoldReleased, reference=reference, **audit)

    def erase(self, basis: str, **audit: Any) -> None:
        """Record that the session's content was erased."""
        self._next(self.SessionErased, basis=basis, **audit)

    def encrypt(self, previous_head: str | None, **audit: Any) -> None:
        """Record that the session's content, stored clear, is sealed from now on."""
        self._next(self.SessionEncrypted, previous_head=previous_head, **audit)


# Sessions snapshotted before holds and erasure existed have neither attribute.
Session.held = False
Session.erased = False


# Every event class of a session, as stored and read (Session.<Name>), enumerated from
# session_events.py: a class declared there is one each concern must handle (the
# registries of domain/event_handlers.py; tests/unit/test_event_handlers.py).
SESSION_EVENTS: tuple[type[Aggregate.Event], ...] = tuple(
    getattr(Session, name)
    for name, declared in vars(events).items()
    if isinstance(declared, type)
    and issubclass(declared, Aggregate.Event)
    and declared.__module__ == events.__name__
)
