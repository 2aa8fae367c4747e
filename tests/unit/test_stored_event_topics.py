"""A stored event names its class by topic (module path and class name). The session's
event classes are declared in domain/session_events.py, but every event must still be
written, and read, under `session_ledger.domain.session:Session.<Name>`: the topic each
had when the classes were nested in the aggregate, which existing stores hold."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import Mapper, StoredEvent
from eventsourcing.utils import get_topic, resolve_topic

from session_ledger.domain import session_events
from session_ledger.domain.session import Session
from tests.conftest import make_ledger, make_settings

OLD = "session_ledger.domain.session:Session."
RECORDS = Path(__file__).with_name("stored_session_events.txt")
SESSION_ID = uuid.UUID("0c6df871-19ad-51ed-9d95-11fec9a4742f")
EVENTS = ("SessionStarted", "MessagesAppended", "HistoryReplaced", "HistoryCleared",
          "MessageRemoved", "MessagesArchived", "LegalHoldPlaced", "LegalHoldReleased",
          "SessionErased", "SessionEncrypted", "StreamStarted", "StreamChunksAppended",
          "StreamCompleted", "StreamAborted")  # fmt: skip


def stored_before() -> list[StoredEvent]:
    lines = [s for s in RECORDS.read_text(encoding="utf-8").splitlines() if s[:1] != "#"]
    return [
        StoredEvent(SESSION_ID, version, topic, state.encode("utf-8"))
        for version, (topic, state) in enumerate((s.split(" ", 1) for s in lines), start=1)
    ]


@pytest.fixture
def mapper(tmp_path: Path) -> Any:
    ledger = make_ledger(make_settings("memory", tmp_path))
    yield ledger.mapper
    ledger.close()


def test_every_declared_event_is_the_sessions_under_its_old_topic() -> None:
    declared = {
        name for name, value in vars(session_events).items()
        if isinstance(value, type) and issubclass(value, Aggregate.Event)
    }  # fmt: skip
    assert declared == set(EVENTS)
    for name in EVENTS:
        adopted = getattr(Session, name)
        assert issubclass(adopted, getattr(session_events, name))
        assert get_topic(adopted) == OLD + name
        assert resolve_topic(OLD + name) is adopted


def test_events_stored_under_the_old_topics_read_and_are_written_back_byte_for_byte(
    mapper: Mapper[uuid.UUID],
) -> None:
    stored = stored_before()
    names = [s.topic.removeprefix(OLD) for s in stored]
    assert set(names) == set(EVENTS)
    events = [mapper.to_domain_event(s) for s in stored]
    assert [type(e) for e in events] == [getattr(Session, name) for name in names]
    again = [mapper.to_stored_event(e) for e in events]
    assert [(s.topic, bytes(s.state)) for s in again] == [(s.topic, s.state) for s in stored]
    session: Any = None
    for e in events:
        session = e.mutate(session)
    assert isinstance(session, Session)
    assert (session.tenant, session.key, session.version) == ("t", "s", 16)
    assert (session.message_count, session.archived_count, session.next_message_id) == (0, 0, 5)
    assert (session.held, session.erased, session.open_streams) == (False, True, ())
