"""The audit entry of an event: who changed what, when and why (the trail itself is
read by `audit_trail.py`)."""

from __future__ import annotations

import uuid
from typing import Any

from .ports import ACTIVE, AuditEntry, SessionViews
from .session import (
    HistoryCleared,
    HistoryReplaced,
    LegalHoldPlaced,
    LegalHoldReleased,
    MessageRemoved,
    MessagesAppended,
    SessionEncrypted,
    SessionErased,
    SessionStarted,
    StreamAborted,
    StreamChunksAppended,
    StreamCompleted,
    StreamStarted,
)


def audit_entry(views: SessionViews, session_id: uuid.UUID, event: Any) -> AuditEntry:
    """The entry of `event`; what a replace or a reset ended is read from the views."""
    changes: dict[str, Any]
    if isinstance(event, SessionStarted):
        changes = {"tenant": event.tenant, "key": event.key}
    elif isinstance(event, MessagesAppended):
        changes = {"added": event.messages}
    elif isinstance(event, HistoryReplaced):
        ended = views.ended_at(session_id, event.originator_version)
        changes = {
            "kept": event.kept,
            "removed": [m.to_dict() for status, m in ended if status == ACTIVE],
            "added": event.messages[event.kept :],
        }
    elif isinstance(event, HistoryCleared):
        ended = views.ended_at(session_id, event.originator_version)
        changes = {
            "cleared": sum(status == ACTIVE for status, _ in ended),
            "cleared_archived": sum(status != ACTIVE for status, _ in ended),
        }
    elif isinstance(event, MessageRemoved):
        changes = {"position": event.position, "message_id": event.message_id,
                   "removed": event.message}  # fmt: skip
    elif isinstance(event, LegalHoldPlaced | LegalHoldReleased):
        # (getattr: a release read from an older store may name no reference)
        changes = {"reference": getattr(event, "reference", None)}
    elif isinstance(event, SessionErased):
        changes = {"basis": event.basis}
    elif isinstance(event, SessionEncrypted):
        changes = {"previous_head": event.previous_head}
    elif isinstance(event, StreamStarted | StreamChunksAppended | StreamCompleted | StreamAborted):
        changes = stream_changes(views, session_id, event)
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


def stream_changes(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    """A stream event's changes: its deltas, and how the stream ended. An abort names the
    partial text the reader had seen (marked aborted), whether or not it was kept."""
    changes: dict[str, Any] = {"stream_id": event.stream_id}
    if isinstance(event, StreamStarted):
        changes.update(role=event.role, turn=event.turn, parent=event.parent)
        return changes
    changes["deltas"] = event.deltas
    if isinstance(event, StreamCompleted):
        changes["added"] = [event.message]
    elif isinstance(event, StreamAborted):
        stream = views.stream_view(session_id, event.stream_id)
        changes.update(
            aborted=True, cause=event.cause, partial=stream.text if stream else None,
            added=[] if event.message is None else [event.message],
        )  # fmt: skip
    return changes
