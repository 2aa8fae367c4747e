"""Hold events stored when a session could hold one legal hold only read as they meant
then: a release lifted that hold whatever reference it named (none was checked), or if
it named none; the holds placed since, several per session, are released by reference."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import Mapper, StoredEvent

from session_ledger.domain.session import Session
from session_ledger.domain.session_events import UNNAMED_HOLD, holds_of
from tests.conftest import make_ledger, make_settings

TOPIC = "session_ledger.domain.session:Session."
TIME = {"_type_": "datetime_iso", "_data_": "2026-12-03T22:11:09.720431+00:00"}
AUDIT = {"actor": "operator", "reason": None, "idempotency_key": None, "request_digest": None}
STARTED = {"timestamp": TIME, "originator_topic": "session_ledger.domain.session:Session",
           "tenant": "t", "key": "s", **AUDIT}  # fmt: skip


@pytest.fixture
def mapper(tmp_path: Path) -> Any:
    ledger = make_ledger(make_settings("memory", tmp_path))
    yield ledger.mapper
    ledger.close()


def replay(mapper: Mapper[uuid.UUID], *events: tuple[str, dict[str, Any]]) -> Session:
    """The session the stored records make, as the store hands them to the mapper."""
    sid = uuid.uuid4()
    stored = [
        StoredEvent(sid, version, TOPIC + name, json.dumps(state).encode("utf-8"))
        for version, (name, state) in enumerate([("SessionStarted", STARTED), *events], start=1)
    ]
    session: Any = None
    for record in stored:
        session = mapper.to_domain_event(record).mutate(session)
    assert isinstance(session, Session)
    return session


def hold(name: str, reference: str | None) -> tuple[str, dict[str, Any]]:
    state: dict[str, Any] = {"timestamp": TIME, **AUDIT}
    if reference is not None:
        state["reference"] = reference
    return name, state


def test_an_old_release_naming_another_reference_lifted_the_one_hold(
    mapper: Mapper[uuid.UUID],
) -> None:
    session = replay(mapper, hold("LegalHoldPlaced", "CASE-1"), hold("LegalHoldReleased", "WRONG"))
    assert (session.held, holds_of(session)) == (False, ())


def test_a_release_naming_no_reference_lifts_the_one_hold(mapper: Mapper[uuid.UUID]) -> None:
    session = replay(mapper, hold("LegalHoldPlaced", "CASE-1"), hold("LegalHoldReleased", None))
    assert (session.held, holds_of(session)) == (False, ())
    again = replay(
        mapper, hold("LegalHoldPlaced", "CASE-1"), hold("LegalHoldReleased", None),
        hold("LegalHoldPlaced", "CASE-2"),
    )  # fmt: skip
    assert (again.held, holds_of(again)) == (True, ("CASE-2",))


def test_several_holds_are_released_by_reference(mapper: Mapper[uuid.UUID]) -> None:
    session = replay(
        mapper, hold("LegalHoldPlaced", "CASE-1"), hold("LegalHoldPlaced", "CASE-2"),
        hold("LegalHoldReleased", "CASE-1"),
    )  # fmt: skip
    assert (session.held, holds_of(session)) == (True, ("CASE-2",))


def test_a_session_snapshotted_under_its_one_hold_shows_it_unnamed(
    mapper: Mapper[uuid.UUID],
) -> None:
    session = replay(mapper, hold("LegalHoldPlaced", "CASE-1"))
    snapshot = mapper.to_stored_event(Session.Snapshot.take(session))
    state = json.loads(snapshot.state)
    del state["state"]["holds"]  # a snapshot stored before there could be several
    old = StoredEvent(snapshot.originator_id, snapshot.originator_version, snapshot.topic,
                      json.dumps(state).encode("utf-8"))  # fmt: skip
    loaded = mapper.to_domain_event(old).mutate(None)
    assert (loaded.held, holds_of(loaded)) == (True, (UNNAMED_HOLD,))
    # Its hold's release (by the reference the events name) lifts it; a hold placed
    # since stays.
    loaded.place_hold("CASE-2", **AUDIT)
    loaded.release_hold("CASE-1", **AUDIT)
    assert (loaded.held, holds_of(loaded)) == (True, ("CASE-2",))
