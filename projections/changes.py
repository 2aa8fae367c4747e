"""What each event does to the views, as backend-neutral changes.

One function turns a write's events into row changes (named tuples: a put makes several,
and a frozen dataclass costs three times as much to build), each event by its handler in
`VIEWS` (one per event class, domain/event_handlers.py); every backend applies them with
its own SQL inside the transaction that stores the events, and `rebuild` feeds the
whole log through the same function, so live views and rebuilt views cannot drift.
"""

from __future__ import annotations

import operator
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import Any, NamedTuple

from session_ledger.domain.event_handlers import EventHandlers
from session_ledger.domain.messages import canonical_json
from session_ledger.domain.ports import ACTIVE, ARCHIVED, WriteBatch
from session_ledger.domain.session import Session
from session_ledger.domain.session_events import AuditedEvent

from .bodies import stored_body


class MessageRow(NamedTuple):
    message_id: int
    role: str
    tokens: int
    tokens_joined: int
    body: str  # its `stored_body`: the JSON string of a plain text, else its canonical JSON
    open_end: bool  # its text is empty or ends in whitespace (TokenCount.open_end)


class InsertMessages(NamedTuple):
    version: int
    status: str
    rows: tuple[MessageRow, ...]


class CloseHistory(NamedTuple):
    """End every live row of these statuses at `version`, except the `kept` oldest, which
    the event says are `kept_messages` (checked when the views are derived again)."""

    version: int
    statuses: tuple[str, ...]
    kept: int = 0
    kept_messages: tuple[dict[str, Any], ...] = ()


class CloseMessage(NamedTuple):
    version: int
    message_id: int


class ArchiveOldest(NamedTuple):
    """End the `messages` oldest live active rows and open archived copies of them."""

    version: int
    messages: int  # (not `count`: a named tuple has a method of that name)


class EraseContent(NamedTuple):
    """Drop every row of the session's content (and its data key): it was erased."""

    version: int


class SealContent(NamedTuple):
    """Seal the session's content, stored clear until `version` (encrypt-existing)."""

    version: int


class OpenStream(NamedTuple):
    version: int
    stream_id: str
    role: str
    turn: str | None
    parent: str | None
    at: datetime


class ExtendStream(NamedTuple):
    """Add the deltas' text to the stream's row (and end it, when `state` is not open)."""

    version: int
    stream_id: str
    text: str
    at: datetime
    state: str = "open"  # or "completed", "aborted"
    cause: str | None = None


Change = (
    InsertMessages
    | CloseHistory
    | CloseMessage
    | ArchiveOldest
    | EraseContent
    | SealContent
    | OpenStream
    | ExtendStream
)


class TimelineRow(NamedTuple):
    """One event's row: its audit facts, and the session's head as the event left it (the
    newest row of a session is its head, so no row is updated when a session changes)."""

    version: int
    recorded_at: datetime
    event_type: str
    actor: str
    reason: str | None
    idempotency_key: str | None
    request_digest: str | None
    message_count: int
    next_message_id: int  # ids below it existed at this version: bounds past-version scans
    archived_count: int
    tokens_added: int  # tokens of the active messages this event added
    ends_rows: bool  # it ends live rows, whose tokens leave the total


class SessionRow(NamedTuple):
    """Written once, by the write that starts the session: what never changes."""

    tenant: str
    key: str
    created_at: datetime


class ViewChanges(NamedTuple):
    session_id: uuid.UUID
    started: bool  # the write creates the session row
    session: SessionRow
    changes: tuple[Change, ...]
    timeline: tuple[TimelineRow, ...]


# A message row's tokens, without a generator per write (`sum(map(_TOKENS, rows))`).
_TOKENS = operator.attrgetter("tokens")

# What one event does to the views: it appends its row changes to `changes` and returns
# the tokens of the active messages it added and whether it ends live rows. The session's
# creation (version 1) changes no rows: the write that stores it makes the session row.
ViewHandler = Callable[[Any, WriteBatch, list[Change]], tuple[int, bool]]
VIEWS: EventHandlers[ViewHandler] = EventHandlers("views")


def view_changes(batch: WriteBatch) -> ViewChanges:
    """The row changes of one write (its session's creation and/or one command event)."""
    changes: list[Change] = []
    timeline: list[TimelineRow] = []
    started = False
    handler = VIEWS.handler
    for event in batch.events:
        added, ends = handler(event)(event, batch, changes)
        if event.originator_version == 1:
            started = True
            timeline.append(timeline_row(event, 0, 0, 0, added, ends))
        else:
            timeline.append(timeline_row(event, batch.message_count, batch.next_message_id,
                                         batch.archived_count, added, ends))  # fmt: skip
    session = SessionRow(batch.tenant, batch.key, batch.events[0].timestamp)
    return ViewChanges(batch.session_id, started, session, tuple(changes), tuple(timeline))


@VIEWS.on(Session.SessionStarted)
def _started(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    return 0, False


@VIEWS.on(Session.MessagesAppended)
def _appended(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    rows = message_rows(batch, event.messages, 0)
    changes.append(InsertMessages(event.originator_version, ACTIVE, rows))
    return sum(map(_TOKENS, rows)), False


@VIEWS.on(Session.HistoryReplaced)
def _replaced(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    v, kept = event.originator_version, event.kept
    changes.append(CloseHistory(v, (ACTIVE,), kept, tuple(event.messages[:kept])))
    rows = message_rows(batch, event.messages, kept)
    changes.append(InsertMessages(v, ACTIVE, rows))
    return sum(map(_TOKENS, rows)), True


def message_rows(
    batch: WriteBatch, messages: list[dict[str, Any]], kept: int
) -> tuple[MessageRow, ...]:
    """The rows of `messages` after the `kept` first (which keep theirs)."""
    added = messages[kept:]
    bodies = batch.bodies[kept:] or [canonical_json(m) for m in added]
    first, counts = batch.first_message_id, batch.counts[kept:]
    return tuple(
        [  # (a list made, not a generator: a put's one row)
            MessageRow(
                first + i,
                m["role"],
                tokens.alone,
                tokens.joined,
                stored_body(m, body),
                tokens.open_end,
            )
            for i, (m, tokens, body) in enumerate(zip(added, counts, bodies, strict=True))
        ]
    )


@VIEWS.on(Session.HistoryCleared)
def _cleared(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    changes.append(CloseHistory(event.originator_version, (ACTIVE, ARCHIVED)))
    return 0, True


@VIEWS.on(Session.MessageRemoved)
def _removed(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    changes.append(CloseMessage(event.originator_version, event.message_id))
    return 0, True


@VIEWS.on(Session.MessagesArchived)
def _archived(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    if event.count:
        changes.append(ArchiveOldest(event.originator_version, event.count))
    return 0, bool(event.count)


@VIEWS.on(Session.SessionErased)
def _erased(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    changes.append(EraseContent(event.originator_version))
    return 0, False


@VIEWS.on(Session.SessionEncrypted)
def _encrypted(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    changes.append(SealContent(event.originator_version))
    return 0, False


@VIEWS.on(Session.LegalHoldPlaced, Session.LegalHoldReleased)
def _hold(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    return 0, False  # in the timeline only


@VIEWS.on(Session.StreamStarted)
def _stream_started(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    changes.append(OpenStream(event.originator_version, event.stream_id, event.role, event.turn,
                              event.parent, event.timestamp))  # fmt: skip
    return 0, False


@VIEWS.on(Session.StreamChunksAppended)
def _stream_chunks(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    changes.append(ExtendStream(event.originator_version, event.stream_id, "".join(event.deltas),
                                event.timestamp))  # fmt: skip
    return 0, False


@VIEWS.on(Session.StreamCompleted)
def _stream_completed(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    return stream_end(event, batch, changes, "completed", None)


@VIEWS.on(Session.StreamAborted)
def _stream_aborted(event: Any, batch: WriteBatch, changes: list[Change]) -> tuple[int, bool]:
    return stream_end(event, batch, changes, "aborted", event.cause)


def stream_end(
    event: Any, batch: WriteBatch, changes: list[Change], state: str, cause: str | None
) -> tuple[int, bool]:
    """A stream's last deltas and its end; its message (a completion's, or the partial an
    abort keeps) enters the history."""
    v = event.originator_version
    text = "".join(event.deltas)
    changes.append(ExtendStream(v, event.stream_id, text, event.timestamp, state, cause))
    message: dict[str, Any] | None = event.message
    if message is None:
        return 0, False
    tokens, body = batch.counts[0], canonical_json(message)
    row = MessageRow(batch.first_message_id, message["role"], tokens.alone, tokens.joined,
                     stored_body(message, body), tokens.open_end)  # fmt: skip
    changes.append(InsertMessages(v, ACTIVE, (row,)))
    return row.tokens, False


def timeline_row(
    event: AuditedEvent, message_count: int, next_message_id: int, archived_count: int,
    tokens_added: int, ends_rows: bool,
) -> TimelineRow:  # fmt: skip
    # The first write of a session stores its creation (version 1) and its command
    # together; the idempotency key identifies that write once, on the command's row.
    first = event.originator_version == 1
    # Positional: every write builds one, and keywords cost twice as much here.
    return TimelineRow(
        event.originator_version, event.timestamp, type(event).__name__, event.actor,
        event.reason, None if first else event.idempotency_key,
        None if first else event.request_digest, message_count, next_message_id,
        archived_count, tokens_added, ends_rows,
    )  # fmt: skip
