"""The ledger's mapper (domain/event_mapper.py) writes a write's messages into the event's
record from the bytes made when they were parsed: every record is byte for byte what the
library's own mapper makes of the same event, so the hash chain and the export do not
change."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from eventsourcing.persistence import Mapper

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.event_mapper import MARKER, EventMapper, _class_version, event_state
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.sealing import KeylessMapper

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "assistant", "content": "héllo wörld ✓ 😀 \u2028 \x7f \x00 \x1f \t \"q\" \\ /"},
    {"role": "user", "content": f"the marker itself: {MARKER} and {MARKER!r}"},
    {"role": "tool", "content": "", "additional_kwargs": {"tool_call_id": "c1", "n": 1e16}},
    {"role": "assistant", "blocks": [
        {"block_type": "text", "text": "two"},
        {"block_type": "image", "url": "https://x/y.png", "detail": None, "w": 1.5, "ok": True},
    ], "additional_kwargs": {"nested": [1, -2, {"z": [None, False, 2**70, 0.1]}]}},
    {"role": "system", "blocks": []},
]  # fmt: skip


@pytest.fixture
def ledger() -> Iterator[Ledger]:
    ledger = open_ledger(Settings(database_url="memory://"))
    yield ledger
    ledger.close()


def test_the_ledger_maps_its_events_with_the_event_mapper(ledger: Ledger) -> None:
    # (inside the mapper that refuses sealed content when no master key is configured:
    # which stores an event with the event mapper's own call, nothing around it)
    mapper = ledger.mapper
    assert isinstance(mapper, KeylessMapper) and type(mapper.inner) is EventMapper
    assert mapper.to_stored_event == mapper.inner.to_stored_event


def test_every_record_is_the_librarys_bytes(ledger: Ledger) -> None:
    for message in MESSAGES:
        ledger.put("k", message, reason="with \x07 a bell", actor="a")
    ledger.put_messages("k", MESSAGES)
    ledger.set("k", [*MESSAGES[:2], {"role": "user", "content": "new"}])
    ledger.set("k", MESSAGES[1:])
    library = Mapper[uuid.UUID](ledger.mapper.transcoder)
    sid = session_id("default", "k")
    records = ledger.recorder.select_events(sid)
    events = list(ledger.events.get(sid))
    assert len(records) == len(events) == 2 + len(MESSAGES) + 2
    for record, event in zip(records, events, strict=True):
        assert record.state == library.to_stored_event(event).state
    assert ledger.verify("k").first_bad_version is None
    assert [m.to_dict() for m in ledger.get_all("k")] == [
        m.to_dict() for m in ledger.get_all("k", as_of_version=len(records))
    ]


def test_a_state_orjson_would_write_otherwise_is_the_transcoders_to_write(
    ledger: Ledger,
) -> None:
    # Floats and integers past 64 bits (orjson writes 1e16 and refuses 2**64), and a UUID
    # (which orjson would write as a string, the transcoder as a transcoded object).
    ledger.put("k", {"role": "user", "content": "x"})
    event = next(iter(ledger.events.get(session_id("default", "k"), gt=1)))
    library = Mapper[uuid.UUID](ledger.mapper.transcoder)
    for value in (1e16, 0.1, 2**64, -(2**63) - 1, 2**63, uuid.uuid4(), [1e-7], {"x": 1.5}):
        vars(event)["reason"] = value
        assert ledger.mapper.to_stored_event(event).state == library.to_stored_event(event).state


def test_events_without_parsed_messages_are_mapped_as_the_library_maps_them(
    ledger: Ledger,
) -> None:
    ledger.put("k", {"role": "user", "content": "x"})
    ledger.place_hold("k", reference="matter-1", reason="a hold")
    ledger.archive_oldest("k", 1)
    library = Mapper[uuid.UUID](ledger.mapper.transcoder)
    sid = session_id("default", "k")
    for record, event in zip(ledger.recorder.select_events(sid), ledger.events.get(sid),
                             strict=True):  # fmt: skip
        assert ledger.mapper.to_stored_event(event).state == record.state
        assert record.state == library.to_stored_event(event).state


def test_a_timestamp_is_the_transcoders_text_of_it(ledger: Ledger) -> None:
    # orjson writes a UTC datetime's text, the transcoder any other's: the same bytes
    # (no microsecond, an early year, another zone, none).
    from datetime import UTC, datetime, timedelta, timezone

    ledger.put("k", {"role": "user", "content": "x"})
    event = next(iter(ledger.events.get(session_id("default", "k"), gt=1)))
    library = Mapper[uuid.UUID](ledger.mapper.transcoder)
    moments = [
        datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 60, tzinfo=UTC),
        datetime(1, 1, 1, tzinfo=UTC),
        datetime(999, 12, 31, 23, 59, 59, 999_999, tzinfo=UTC),
        datetime(2026, 1, 2, 3, 4, 5, 6, tzinfo=timezone(timedelta(hours=5, seconds=7))),
        datetime(2026, 1, 2, 3, 4, 5, 6),
    ]
    for moment in moments:
        vars(event)["timestamp"] = moment
        assert ledger.mapper.to_stored_event(event).state == library.to_stored_event(event).state


def test_an_event_class_version_is_looked_up_once_per_class(ledger: Ledger) -> None:
    """A look-up that fails on a class raises and formats an AttributeError inside
    `getattr` (about 2k instructions): each class's `class_version` is found once."""
    ledger.put("k", {"role": "user", "content": "one"})
    ledger.put("k", {"role": "user", "content": "two"})
    events = list(ledger.events.get(session_id("default", "k")))[1:]
    _class_version.cache_clear()
    for event in events:
        assert "class_version" not in event_state(event)[2]
    assert _class_version.cache_info().misses == 1
    assert _class_version.cache_info().hits == len(events) - 1
