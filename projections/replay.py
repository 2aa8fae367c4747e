"""Canonical replay: fold a session's events into its history at any version.

Slow on purpose (it reads every event from the start) and simple enough to trust: the
oracle every fast view is tested against, and what `rebuild --check` and `verify` use.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.session import (
    HistoryCleared,
    HistoryReplaced,
    MessageRemoved,
    MessagesAppended,
    MessagesArchived,
    SessionStarted,
    StreamAborted,
    StreamChunksAppended,
    StreamCompleted,
    StreamStarted,
)


@dataclass
class ReplayedSession:
    """A session as it stood after `version`: (message id, message) pairs in order."""

    version: int = 0
    active: list[tuple[int, ChatMessage]] = field(default_factory=list)
    archived: list[tuple[int, ChatMessage]] = field(default_factory=list)
    next_message_id: int = 0

    @property
    def messages(self) -> list[ChatMessage]:
        return [m for _, m in self.active]

    @property
    def archived_messages(self) -> list[ChatMessage]:
        return [m for _, m in self.archived]


def replay(events: Iterable[Any], version: int | None = None) -> ReplayedSession:
    """Fold `events` (in stream order) up to and including `version` (None: all)."""
    state = ReplayedSession()
    for event in events:
        if version is not None and event.originator_version > version:
            break
        apply(state, event)
    return state


def apply(state: ReplayedSession, event: Any) -> None:
    """One event's effect on a replayed session."""
    state.version = event.originator_version
    if isinstance(event, SessionStarted):
        return
    if isinstance(event, MessagesAppended | HistoryReplaced):
        kept = 0
        if isinstance(event, HistoryReplaced):
            kept = event.kept
            state.active = state.active[:kept]
        for m in event.messages[kept:]:
            state.active.append((state.next_message_id, ChatMessage.parse(m)))
            state.next_message_id += 1
    elif isinstance(event, HistoryCleared):
        state.active, state.archived = [], []
    elif isinstance(event, MessageRemoved):
        state.active = [(i, m) for i, m in state.active if i != event.message_id]
    elif isinstance(event, MessagesArchived):
        state.archived += state.active[: event.count]
        state.active = state.active[event.count :]
    elif isinstance(event, StreamCompleted | StreamAborted):
        # a completion's message, or the partial an abort kept, enters the history
        if event.message is not None:
            state.active.append((state.next_message_id, ChatMessage.parse(event.message)))
            state.next_message_id += 1
    elif isinstance(event, StreamStarted | StreamChunksAppended):
        return  # in the events and the streams view; not in the history
    else:
        raise TypeError(f"cannot replay {type(event).__name__}")
