"""A write's stored record is the library mapper's, byte for byte, and its events the
library's.

The ledger's mapper encodes a write's messages once: their canonical JSON goes into the
stored record where the library's mapper would encode them again, and the other fields
are written one by one. The records (and so the hash chains over them) must not change
by a single byte, for any message `parse` accepts and any audit text, compressed or not,
whatever datetime transcoding the transcoder has. The session makes its events without
the frozen dataclass's constructor: they must equal the constructor's, field for field
and in its order.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import pytest
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.domain import Aggregate
from eventsourcing.persistence import JSONTranscoder, Mapper, Transcoding
from hypothesis import given, settings
from hypothesis import strategies as st

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import Session
from tests.unit.test_message_json import messages, texts

# Audit text as a caller may give it: quotes, backslashes, the spliced key itself.
audit_texts = texts | st.sampled_from(['"messages":[]', '\\"messages\\":[]', "}{", ""])


@pytest.fixture(scope="module")
def ledger() -> Iterator[Ledger]:
    settings = Settings(database_url="memory://")
    migrate(settings)
    ledger = open_ledger(settings)
    yield ledger
    ledger.close()


def recorded(ledger: Ledger, batch: list[object], actor: str, reason: str) -> list[tuple]:
    """(ledger's record, library mapper's record) of a session started, appended to,
    replaced, with a message removed, archived and cleared."""
    _, dicts, bodies = ledger._parse_messages(batch, allow_empty=True)
    audit = {"actor": actor, "reason": reason, "idempotency_key": None, "request_digest": None}
    session = Session(tenant="t", key="k", **audit)
    session.append(dicts, **audit)
    session.replace(dicts, kept=0, **audit)
    session.remove(position=0, message_id=1, message=dicts[0], **audit)  # a dict field
    session.archive(count=len(dicts) - 1, **audit)
    session.clear(**audit)
    events = session.collect_events()
    mapper = ledger.mapper
    return [(mapper.to_stored_event(e, bodies), Mapper.to_stored_event(mapper, e)) for e in events]


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), audit_texts, audit_texts)
def test_spliced_records_equal_the_mappers(
    ledger: Ledger, batch: list[object], actor: str, reason: str
) -> None:
    for spliced, mapped in recorded(ledger, batch, actor, reason):
        assert spliced == mapped


def test_the_splice_is_used_and_a_mismatch_falls_back(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    batch = [{"role": "user", "content": 'hé \u0000 "quoted" [] {}'}]
    _, dicts, bodies = ledger._parse_messages(batch, allow_empty=False)
    audit = {"actor": "a", "reason": None, "idempotency_key": None, "request_digest": None}
    session = Session(tenant="t", key="k", **audit)
    session.append(dicts, **audit)
    appended = session.collect_events()[-1]
    mapper = ledger.mapper
    expected = Mapper.to_stored_event(mapper, appended)
    encoded: list[object] = []
    encode = mapper.transcoder.encode
    monkeypatch.setattr(mapper.transcoder, "encode", lambda o: encoded.append(o) or encode(o))
    assert mapper.to_stored_event(appended, bodies) == expected
    assert encoded == []  # spliced, not encoded by the library's path
    # Bodies that do not match the event's messages one for one are not used.
    assert mapper.to_stored_event(appended) == expected
    assert mapper.to_stored_event(appended, (*bodies, *bodies)) == expected
    assert len(encoded) == 2


def test_a_compressed_record_is_spliced_then_compressed() -> None:
    settings = Settings(database_url="memory://")
    ledger = open_ledger(settings)  # (its factory makes no compressor: add one)
    try:
        mapper = ledger.mapper
        mapper.compressor = ZlibCompressor()
        _, dicts, bodies = ledger._parse_messages([{"role": "user", "content": "hi"}],
                                                  allow_empty=False)  # fmt: skip
        audit = {"actor": "a", "reason": None, "idempotency_key": None, "request_digest": None}
        session = Session(tenant="t", key="k", **audit)
        session.append(dicts, **audit)
        appended = session.collect_events()[-1]
        assert mapper.to_stored_event(appended, bodies) == Mapper.to_stored_event(mapper, appended)
    finally:
        ledger.close()


class DatetimeAsParts(Transcoding):
    """Another transcoding of datetimes than the library's ISO text (not a string)."""

    type = datetime
    name = "datetime_parts"

    def encode(self, obj: datetime) -> Any:
        return [obj.isoformat(), '"quoted"']

    def decode(self, data: Any) -> datetime:
        return datetime.fromisoformat(data[0])


class DatetimeAsText(DatetimeAsParts):
    name = 'datetime "text"'

    def encode(self, obj: datetime) -> Any:
        return f"at {obj.isoformat()} \\ é"


@pytest.mark.parametrize("transcoding", [DatetimeAsParts, DatetimeAsText])
def test_records_follow_the_transcoders_own_datetime_transcoding(
    ledger: Ledger, transcoding: type[Transcoding], monkeypatch: pytest.MonkeyPatch
) -> None:
    transcoder = JSONTranscoder()
    transcoder.register(transcoding())
    monkeypatch.setattr(ledger.mapper, "transcoder", transcoder)
    for ours, theirs in recorded(ledger, [{"role": "user", "content": "hi"}], "a", "r"):
        assert ours == theirs
        assert transcoding.name.encode().replace(b'"', b'\\"') in ours.state


def test_an_event_with_another_type_of_field_takes_the_library_path(ledger: Ledger) -> None:
    @dataclasses.dataclass(frozen=True)
    class Flagged(Aggregate.Event):
        flag: bool
        ratio: float

    event = Flagged(
        originator_id=Session.create_id("t", "k"), originator_version=2,
        timestamp=Flagged.create_timestamp(), flag=True, ratio=0.5,
    )  # fmt: skip
    assert ledger.mapper._state_json(event, ()) is None
    assert ledger.mapper.to_stored_event(event) == Mapper.to_stored_event(ledger.mapper, event)


def library_event(session: Session, event_class: Any, **fields: Any) -> Any:
    """The event the library's constructor makes for `session`'s next version."""
    return event_class(originator_id=session.id, originator_version=session.version + 1, **fields)


def test_events_equal_the_constructors_field_for_field_and_in_order() -> None:
    audit = {"actor": "a", "reason": None, "idempotency_key": "i", "request_digest": "d"}
    session = Session(tenant="t", key="k", **audit)
    session.collect_events()
    calls: list[tuple[Any, dict[str, Any]]] = [
        (Session.MessagesAppended, {"messages": [{"role": "user"}], **audit}),
        (Session.HistoryReplaced, {"messages": [], "kept": 0, **audit}),
        (Session.MessageRemoved, {"position": 0, "message_id": 3, "message": {}, **audit}),
        (Session.MessagesArchived, {"count": 0, **audit}),
        (Session.HistoryCleared, dict(reversed(audit.items()))),  # another order
    ]
    for event_class, fields in calls:
        before = session.version
        session.trigger_event(event_class, **fields)
        (made,) = session.collect_events()
        expected = library_event(session, event_class, timestamp=made.timestamp, **fields)
        expected = dataclasses.replace(expected, originator_version=before + 1)
        assert made == expected
        assert list(vars(made).items()) == list(vars(expected).items())
        assert session.version == before + 1 and session.modified_on == made.timestamp


@pytest.mark.parametrize(
    "fields",
    [
        {"actor": "a", "reason": None, "idempotency_key": None},  # one missing
        {"actor": "a", "reason": None, "idempotency_key": None, "request_digest": None,
         "extra": 1},  # one unknown
    ],
)  # fmt: skip
def test_an_event_with_missing_or_unknown_fields_is_refused(fields: dict[str, Any]) -> None:
    audit = {"actor": "a", "reason": None, "idempotency_key": None, "request_digest": None}
    session = Session(tenant="t", key="k", **audit)
    session.collect_events()
    state = dict(vars(session))
    with pytest.raises(TypeError, match="Can't construct event"):
        session.trigger_event(Session.HistoryCleared, **fields)
    assert vars(session) == state and session.pending_events == []
