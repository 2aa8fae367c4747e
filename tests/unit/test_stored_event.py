"""A write's stored record is the library mapper's, byte for byte.

The ledger's mapper encodes a write's messages once: their canonical JSON goes into the
stored record where the library's mapper would encode them again. The records (and so
the hash chains over them) must not change by a single byte, for any message `parse`
accepts and any audit text, compressed or not.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from eventsourcing.compressor import ZlibCompressor
from eventsourcing.persistence import Mapper
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
    """(spliced record, mapper's record) of a session started, appended to and replaced."""
    _, dicts, bodies = ledger._parse_messages(batch, allow_empty=True)
    audit = {"actor": actor, "reason": reason, "idempotency_key": None, "request_digest": None}
    session = Session(tenant="t", key="k", **audit)
    session.append(dicts, **audit)
    session.replace(dicts, kept=0, **audit)
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
