"""The audit trail: each event of a session as who changed what, when and why; and the
check of a session's hash chain."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

from .errors import SessionNotFound
from .inputs import check_int, check_limit
from .integrity import verify_chain
from .ports import ACTIVE, AuditEntry, ChainReport, SessionViews
from .reads import Reads
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


class AuditTrail(Reads):
    """The audit side of the ledger (mixed into it, which provides these attributes): the
    trail of a session's events, and the check of its hash chain."""

    events: Any  # the Application's event store
    recorder: Any  # the Application's recorder

    def audit(
        self, key: str, *, tenant: str | None = None, after_version: int = 0, limit: int = 100
    ) -> list[AuditEntry]:
        """The session's events after `after_version`, oldest first: who changed what, when."""
        check_int("after_version", after_version, least=0)
        check_limit("limit", limit, 1000)
        sid = self._session_id(key, tenant)
        if self.views.session_head(sid) is None:
            raise SessionNotFound(self._tenant(tenant), key)
        events = self.events.get(sid, gt=after_version or None, limit=limit)
        return [audit_entry(self.views, sid, e) for e in events]

    def verify(
        self, key: str, *, tenant: str | None = None, pinned: Mapping[int, bytes] | None = None
    ) -> ChainReport:
        """Recompute the session's hash chain from its stored events and compare it with
        the hashes stored as they were written; the report names the first version that
        differs. Reads a page of events at a time. `pinned`: heads (by version) that the
        chain must pass through, from signed checkpoints (integrity.verify_chain)."""
        sid = self._session_id(key, tenant)
        head = self.views.session_head(sid)
        if head is None:
            raise SessionNotFound(self._tenant(tenant), key)

        def records(after: int, limit: int) -> list[tuple[int, str, bytes]]:
            page = self.recorder.select_events(sid, gt=after or None, limit=limit)
            return [(r.originator_version, r.topic, r.state) for r in page]

        def hashes(after: int, limit: int) -> list[tuple[int, bytes | None]]:
            return self.views.stored_chain(sid, after, limit)

        return verify_chain(sid, head.tenant, key, head.version, records, hashes, pinned)

    def verify_all(self) -> Iterator[ChainReport]:
        """`verify` of every session of every tenant, in (tenant, key) order."""
        after: tuple[str, str] | None = None
        while page := self.views.all_sessions(after, 1000):
            for tenant, key in page:
                yield self.verify(key, tenant=tenant)
            after = page[-1]
