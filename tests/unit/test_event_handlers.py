"""Every concern has one handler for every event class of a session (the classes are
enumerated from domain/session_events.py, so a class added there fails here until each
concern handles it), and an event of a class a concern does not handle is an error,
never a default."""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.domain import Aggregate

from session_ledger.domain import session_events
from session_ledger.domain.audit import AUDIT, audit_entry
from session_ledger.domain.event_handlers import EventHandlers, UnhandledEvent
from session_ledger.domain.ports import WriteBatch
from session_ledger.domain.session import SESSION_EVENTS, Session
from session_ledger.projections.changes import VIEWS, view_changes
from session_ledger.projections.rsmf import RSMF_EVENTS
from tests.reference_replay import REPLAY, replay

VIEWER = Path(__file__).parents[2] / "api" / "ui" / "replay.js"
REGISTRIES: dict[str, EventHandlers[Any]] = {
    "views": VIEWS, "audit": AUDIT, "export (RSMF)": RSMF_EVENTS, "replay": REPLAY,
}  # fmt: skip


def test_the_session_events_are_every_class_declared_in_session_events() -> None:
    declared = [
        value for value in vars(session_events).values()
        if isinstance(value, type) and issubclass(value, Aggregate.Event)
    ]  # fmt: skip
    assert declared
    assert [e.__name__ for e in SESSION_EVENTS] == [d.__name__ for d in declared]
    assert all(e is getattr(Session, e.__name__) for e in SESSION_EVENTS)


@pytest.mark.parametrize("concern", list(REGISTRIES))
def test_every_concern_handles_every_session_event(concern: str) -> None:
    missing = REGISTRIES[concern].missing(SESSION_EVENTS)
    assert missing == [], f"{concern} has no handler for {[e.__name__ for e in missing]}"


def test_the_viewer_summarises_every_session_event() -> None:
    source = VIEWER.read_text(encoding="utf-8")
    table = re.search(r"^const SUMMARIES = \{\n(.*?)^\};", source, re.M | re.S)
    assert table is not None, "api/ui/replay.js has no SUMMARIES table"
    summarised = set(re.findall(r"^  (\w+): ", table.group(1), re.M))
    missing = [e.__name__ for e in SESSION_EVENTS if e.__name__ not in summarised]
    assert missing == [], f"the viewer has no summary for {missing}"
    assert summarised <= {e.__name__ for e in SESSION_EVENTS}


class Unknown:
    """An event of no session class, with the fields every event has (and a `count`,
    which the audit trail once read from any event it did not know)."""

    originator_id = uuid.uuid4()
    originator_version = 2
    timestamp = Session.MessagesAppended.create_timestamp()
    actor = "a"
    reason = None
    idempotency_key = None
    request_digest = None
    count = 3


def test_an_unknown_event_is_an_error_in_every_concern() -> None:
    event = Unknown()
    with pytest.raises(UnhandledEvent, match="no audit handler for Unknown"):
        audit_entry(None, event.originator_id, event)  # type: ignore[arg-type]
    batch = WriteBatch(
        session_id=event.originator_id, tenant="t", key="k", events=(event,),
        first_message_id=0, message_count=0, archived_count=0, next_message_id=0, counts=(),
    )  # fmt: skip
    with pytest.raises(UnhandledEvent, match="no views handler for Unknown"):
        view_changes(batch)
    with pytest.raises(UnhandledEvent, match="no replay handler for Unknown"):
        replay([event])
    with pytest.raises(UnhandledEvent, match="no RSMF export handler for Unknown"):
        RSMF_EVENTS.by_name("Unknown")


def test_a_class_has_one_handler_per_concern() -> None:
    handlers: EventHandlers[Any] = EventHandlers("a concern")
    handlers.on(Session.MessagesAppended)(print)
    with pytest.raises(ValueError, match="a concern handler of MessagesAppended exists"):
        handlers.on(Session.MessagesAppended)(print)
