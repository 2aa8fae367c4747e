"""The events of a session: what each records, and how it changes the session's O(1)
state (its `apply`).

A stored event names its class by topic. The Session aggregate (session.py) adopts each
class here under the same name, and the library redefines it there as `Session.<Name>`,
a subclass of the one here: that is the class triggered, stored and read, so every topic
stays `session_ledger.domain.session:Session.<Name>`, as in the stores written when the
events were nested in the aggregate (tests/unit/test_stored_event_topics.py). Trigger
and match events as `Session.<Name>`.

Every event records who made the change (`actor`), why (`reason`), and, when the caller
gave one, the idempotency key with the digest of the request it served. The command
events have their own `apply` rather than being made by the @event decorator: the
decorator's event maps its fields onto the method's parameters again on every write (and
every replayed event).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Protocol

from eventsourcing.domain import Aggregate


class AuditedEvent(Protocol):
    """What every event records beside its change (the audit trail's and the timeline's
    fields). Each class declares these fields itself, after its own: a stored event's
    JSON lists its fields in the order its class declares them, after its bases', so a
    base declaring them would put them first and change the bytes of every new event."""

    @property
    def originator_version(self) -> int: ...
    @property
    def timestamp(self) -> datetime: ...
    @property
    def actor(self) -> str: ...
    @property
    def reason(self) -> str | None: ...
    @property
    def idempotency_key(self) -> str | None:
        """The write id: the caller's idempotency key, or one the write made."""

    @property
    def request_digest(self) -> str | None: ...


class SessionStarted(Aggregate.Created):
    tenant: str
    key: str
    actor: str
    reason: str | None
    idempotency_key: str | None
    request_digest: str | None


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


# A session may be under several legal holds, each placed and released by its reference
# (a matter, a ticket): `holds` lists those held, oldest first, and `held` says whether
# there is any. A session could once hold one hold only, and a release then lifted it
# whatever reference it named: such stored releases mean that still. A session
# snapshotted then has `held` and no `holds`: its one hold shows as UNNAMED_HOLD.
UNNAMED_HOLD = ""  # no reference is empty


def holds_of(aggregate: Any) -> tuple[str, ...]:
    """The references of the holds the session is under, oldest first."""
    holds = tuple(aggregate.holds)  # a snapshot keeps the tuple as a list
    return (UNNAMED_HOLD,) if aggregate.held and not holds else holds


class LegalHoldPlaced(Aggregate.Event):
    reference: str
    actor: str
    reason: str | None
    idempotency_key: str | None
    request_digest: str | None

    def apply(self, aggregate: Any) -> None:
        aggregate.holds = (*holds_of(aggregate), self.reference)
        aggregate.held = True


class LegalHoldReleased(Aggregate.Event):
    """The hold placed under `reference` released. One stored when a session could hold
    one hold only released that hold, whatever reference it named (or none)."""

    reference: str
    actor: str
    reason: str | None
    idempotency_key: str | None
    request_digest: str | None

    def apply(self, aggregate: Any) -> None:
        held = holds_of(aggregate)
        reference = getattr(self, "reference", None)
        if reference not in held:  # the unnamed hold, or the one hold of an older store
            reference = UNNAMED_HOLD if UNNAMED_HOLD in held else None
        aggregate.holds = () if reference is None else tuple(r for r in held if r != reference)
        aggregate.held = bool(aggregate.holds)


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


def _without(ids: Any, stream_id: str) -> tuple[str, ...]:
    return tuple(i for i in ids if i != stream_id)
