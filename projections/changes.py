"""What each event does to the views, as backend-neutral changes.

One function turns a write's events into row changes (named tuples: a put makes several,
and a frozen dataclass costs three times as much to build); every backend applies them with
its own SQL inside the transaction that stores the events, and `rebuild` feeds the
whole log through the same function, so live views and rebuilt views cannot drift.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NamedTuple

from session_ledger.domain.messages import canonical_json
from session_ledger.domain.ports import ACTIVE, ARCHIVED, WriteBatch
from session_ledger.domain.session import (
    HistoryCleared,
    HistoryReplaced,
    LegalHoldPlaced,
    LegalHoldReleased,
    MessageRemoved,
    MessagesAppended,
    MessagesArchived,
    SessionEncrypted,
    SessionErased,
    SessionStarted,
    StreamAborted,
    StreamChunksAppended,
    StreamCompleted,
    StreamStarted,
)

from .bodies import stored_body


class MessageRow(NamedTuple):
    message_id: int
    role: str
    tokens: int
    tokens_joined: int
    body: str  # its `stored_body`: the JSON string of a plain text, else its canonical JSON


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


def view_changes(batch: WriteBatch) -> ViewChanges:
    """The row changes of one write (a SessionStarted and/or one command event)."""
    changes: list[Change] = []
    timeline: list[TimelineRow] = []
    started = False
    for event in batch.events:
        v = event.originator_version
        count, next_id, archived = batch.message_count, batch.next_message_id, batch.archived_count
        added, ends = 0, True
        if isinstance(event, SessionStarted):
            started, count, next_id, archived, ends = True, 0, 0, 0, False
        elif isinstance(event, MessagesAppended | HistoryReplaced):
            kept = 0
            if isinstance(event, HistoryReplaced):
                kept = event.kept
                changes.append(CloseHistory(v, (ACTIVE,), kept, tuple(event.messages[:kept])))
            bodies = batch.bodies[kept:] or [canonical_json(m) for m in event.messages[kept:]]
            rows = tuple(
                MessageRow(
                    batch.first_message_id + i,
                    m["role"],
                    batch.counts[kept + i].alone,
                    batch.counts[kept + i].joined,
                    stored_body(m, body),
                )
                for i, (m, body) in enumerate(zip(event.messages[kept:], bodies, strict=True))
            )
            changes.append(InsertMessages(v, ACTIVE, rows))
            added, ends = sum(r.tokens for r in rows), isinstance(event, HistoryReplaced)
        elif isinstance(event, HistoryCleared):
            changes.append(CloseHistory(v, (ACTIVE, ARCHIVED)))
        elif isinstance(event, MessageRemoved):
            changes.append(CloseMessage(v, event.message_id))
        elif isinstance(event, StreamStarted):
            ends = False
            changes.append(OpenStream(v, event.stream_id, event.role, event.turn, event.parent,
                                      event.timestamp))  # fmt: skip
        elif isinstance(event, StreamChunksAppended | StreamCompleted | StreamAborted):
            ends = False
            state, cause = "open", None
            if isinstance(event, StreamCompleted):
                state = "completed"
            elif isinstance(event, StreamAborted):
                state, cause = "aborted", event.cause
            text = "".join(event.deltas)
            changes.append(ExtendStream(v, event.stream_id, text, event.timestamp, state, cause))
            message = stream_message(event)
            if message is not None:
                tokens, body = batch.counts[0], canonical_json(message)
                row = MessageRow(batch.first_message_id, message["role"], tokens.alone,
                                 tokens.joined, stored_body(message, body))  # fmt: skip
                changes.append(InsertMessages(v, ACTIVE, (row,)))
                added = row.tokens
        elif isinstance(event, MessagesArchived):
            ends = bool(event.count)
            if event.count:
                changes.append(ArchiveOldest(v, event.count))
        elif isinstance(event, SessionErased):
            changes.append(EraseContent(v))
            ends = False
        elif isinstance(event, SessionEncrypted):
            changes.append(SealContent(v))
            ends = False
        elif isinstance(event, LegalHoldPlaced | LegalHoldReleased):
            ends = False
        else:
            raise TypeError(f"no projection for {type(event).__name__}")
        timeline.append(timeline_row(event, count, next_id, archived, added, ends))
    session = SessionRow(batch.tenant, batch.key, batch.events[0].timestamp)
    return ViewChanges(batch.session_id, started, session, tuple(changes), tuple(timeline))


def stream_message(event: Any) -> dict[str, Any] | None:
    """The message a stream event adds to the history: a completion's, or the partial an
    abort keeps; None for any other event."""
    if isinstance(event, StreamCompleted | StreamAborted):
        message: dict[str, Any] | None = event.message
        return message
    return None


def timeline_row(
    event: Any, message_count: int, next_message_id: int, archived_count: int,
    tokens_added: int, ends_rows: bool,
) -> TimelineRow:  # fmt: skip
    # The first write of a session stores SessionStarted and its command together; the
    # idempotency key identifies that write once, on the command's row.
    first = isinstance(event, SessionStarted)
    # Positional: every write builds one, and keywords cost twice as much here.
    return TimelineRow(
        event.originator_version, event.timestamp, type(event).__name__, event.actor,
        event.reason, None if first else event.idempotency_key,
        None if first else event.request_digest, message_count, next_message_id,
        archived_count, tokens_added, ends_rows,
    )  # fmt: skip
