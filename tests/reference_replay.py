"""The reference replay the views are tested against: a session's events folded into its
history at any version, from the first event on.

Slow on purpose and simple enough to trust: it reads every event from the start and
keeps every message in memory. The ledger itself never replays this way (its views are
written with each event, and `rebuild` derives them again through the write path's own
`view_changes`); the tests compare those views with this fold
(tests/integration/test_views_equal_replay.py and others), and the replay benchmark
(bench/replay.py) times it as the answer of a store without temporal views.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from session_ledger.domain.event_handlers import EventHandlers
from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.session import Session


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

    def add(self, messages: Iterable[dict[str, Any]]) -> None:
        for m in messages:
            self.active.append((self.next_message_id, ChatMessage.parse(m)))
            self.next_message_id += 1


# One event's effect on a replayed session's history.
REPLAY: EventHandlers[Callable[[ReplayedSession, Any], None]] = EventHandlers("replay")


def replay(events: Iterable[Any], version: int | None = None) -> ReplayedSession:
    """Fold `events` (in stream order) up to and including `version` (None: all)."""
    state = ReplayedSession()
    for event in events:
        if version is not None and event.originator_version > version:
            break
        REPLAY.handler(event)(state, event)
        state.version = event.originator_version
    return state


@REPLAY.on(
    Session.SessionStarted,
    Session.LegalHoldPlaced,
    Session.LegalHoldReleased,
    Session.SessionEncrypted,
    Session.StreamStarted,
    Session.StreamChunksAppended,
)
def _history_unchanged(state: ReplayedSession, event: Any) -> None:
    """A stream's start and deltas are in the events and the streams view, not in the
    history; a hold, or sealing the content, changes no message."""


@REPLAY.on(Session.MessagesAppended)
def _appended(state: ReplayedSession, event: Any) -> None:
    state.add(event.messages)


@REPLAY.on(Session.HistoryReplaced)
def _replaced(state: ReplayedSession, event: Any) -> None:
    state.active = state.active[: event.kept]
    state.add(event.messages[event.kept :])


@REPLAY.on(Session.HistoryCleared, Session.SessionErased)
def _cleared(state: ReplayedSession, event: Any) -> None:
    state.active, state.archived = [], []


@REPLAY.on(Session.MessageRemoved)
def _removed(state: ReplayedSession, event: Any) -> None:
    state.active = [(i, m) for i, m in state.active if i != event.message_id]


@REPLAY.on(Session.MessagesArchived)
def _archived(state: ReplayedSession, event: Any) -> None:
    state.archived += state.active[: event.count]
    state.active = state.active[event.count :]


@REPLAY.on(Session.StreamCompleted, Session.StreamAborted)
def _stream_ended(state: ReplayedSession, event: Any) -> None:
    # a completion's message, or the partial an abort kept, enters the history
    if event.message is not None:
        state.add([event.message])
