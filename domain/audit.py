"""The audit entry of an event: who changed what, when and why (the trail itself is
read by `audit_trail.py`)."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from .event_handlers import EventHandlers
from .ports import ACTIVE, AuditEntry, SessionViews
from .session import Session
from .session_events import AuditedEvent

# What one event changed, as its audit entry says: from the event, and for a replace or a
# reset from the views too (what it ended).
AuditHandler = Callable[[SessionViews, uuid.UUID, Any], dict[str, Any]]
AUDIT: EventHandlers[AuditHandler] = EventHandlers("audit")


def audit_entry(views: SessionViews, session_id: uuid.UUID, event: AuditedEvent) -> AuditEntry:
    """The entry of `event`: the fields every event records, and what it changed."""
    return AuditEntry(
        version=event.originator_version,
        event_type=type(event).__name__,
        recorded_at=event.timestamp,
        actor=event.actor,
        reason=event.reason,
        idempotency_key=event.idempotency_key,
        changes=AUDIT.handler(event)(views, session_id, event),
    )


@AUDIT.on(Session.SessionStarted)
def _started(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"tenant": event.tenant, "key": event.key}


@AUDIT.on(Session.MessagesAppended)
def _appended(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"added": event.messages}


# The most bytes (canonical JSON) of the messages a replace's entry lists as removed. Its
# added messages are one write's, bounded by the write limits; what it removed may be a
# whole history (a set([]) of 156 MiB of messages made one entry, and one answer, of 156
# MiB). Past it the entry lists the first that fit and says how many it removed
# (`removed_count`): the rest are read at the version before (get_all(as_of_version=)).
LISTED_REMOVED_BYTES = 1024 * 1024


@AUDIT.on(Session.HistoryReplaced)
def _replaced(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    ended = [m for status, m in views.ended_at(session_id, event.originator_version)
             if status == ACTIVE]  # fmt: skip
    listed: list[dict[str, Any]] = []
    size = 0
    for message in ended:
        size += len(message.to_json().encode())
        if size > LISTED_REMOVED_BYTES and listed:
            break
        listed.append(message.to_dict())
    changes: dict[str, Any] = {
        "kept": event.kept,
        "removed": listed,
        "added": event.messages[event.kept :],
    }
    if len(listed) < len(ended):
        changes["removed_count"] = len(ended)
    return changes


@AUDIT.on(Session.HistoryCleared)
def _cleared(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    ended = views.ended_at(session_id, event.originator_version)
    return {
        "cleared": sum(status == ACTIVE for status, _ in ended),
        "cleared_archived": sum(status != ACTIVE for status, _ in ended),
    }


@AUDIT.on(Session.MessageRemoved)
def _removed(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"position": event.position, "message_id": event.message_id, "removed": event.message}


@AUDIT.on(Session.MessagesArchived)
def _archived(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"archived": event.count}


@AUDIT.on(Session.LegalHoldPlaced, Session.LegalHoldReleased)
def _hold(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    # (getattr: a release read from an older store may name no reference)
    return {"reference": getattr(event, "reference", None)}


@AUDIT.on(Session.SessionErased)
def _erased(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"basis": event.basis}


@AUDIT.on(Session.SessionEncrypted)
def _encrypted(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"previous_head": event.previous_head}


@AUDIT.on(Session.StreamStarted)
def _stream_started(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"stream_id": event.stream_id, "role": event.role, "turn": event.turn,
            "parent": event.parent}  # fmt: skip


@AUDIT.on(Session.StreamChunksAppended)
def _stream_chunks(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"stream_id": event.stream_id, "deltas": event.deltas}


@AUDIT.on(Session.StreamCompleted)
def _stream_completed(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    return {"stream_id": event.stream_id, "deltas": event.deltas, "added": [event.message]}


@AUDIT.on(Session.StreamAborted)
def _stream_aborted(views: SessionViews, session_id: uuid.UUID, event: Any) -> dict[str, Any]:
    """An abort names the partial text the reader had seen (marked aborted), whether or
    not it was kept."""
    stream = views.stream_view(session_id, event.stream_id)
    return {
        "stream_id": event.stream_id, "deltas": event.deltas, "aborted": True,
        "cause": event.cause, "partial": stream.text if stream else None,
        "added": [] if event.message is None else [event.message],
    }  # fmt: skip
