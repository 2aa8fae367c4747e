"""Whether a session was erased, and the error that says when, why and on what basis."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from typing import Any

from eventsourcing.persistence import EventStore

from .errors import SessionErasedError
from .ports import SessionViews

ERASED_EVENT = "SessionErased"


class Erasures:
    """Asked by a write that finds its session erased and by a read that finds no rows:
    the session's head in the views, its last event from the event store."""

    def __init__(self, views: SessionViews, events: EventStore[uuid.UUID]) -> None:
        self._views, self._events = views, events

    def error(self, session_id: uuid.UUID, key: str) -> SessionErasedError | None:
        """The `SessionErasedError` of an erased session (when, why, on what basis), else
        None. An erased session's last event is its erasure: nothing is written after it."""
        head = self._views.session_head(session_id)
        if head is None or head.last_event != ERASED_EVENT:
            return None
        found: Iterable[Any] = self._events.get(session_id, gt=head.version - 1, limit=1)
        (event,) = found  # (the session's SessionErased event)
        return SessionErasedError(key, event.timestamp, event.reason, event.basis)
