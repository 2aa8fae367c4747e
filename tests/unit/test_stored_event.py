"""A write's stored record is the library mapper's, byte for byte.

The ledger encodes a write's messages once: their canonical JSON goes into the stored
record where the mapper would encode them again. The records (and so the hash chains
over them) must not change by a single byte, for any message `parse` accepts and any
audit text.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
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
    return [(ledger._stored_event(e, bodies), ledger.mapper.to_stored_event(e)) for e in events]


@settings(max_examples=200, deadline=None)
@given(st.lists(messages, min_size=1, max_size=4), audit_texts, audit_texts)
def test_spliced_records_equal_the_mappers(
    ledger: Ledger, batch: list[object], actor: str, reason: str
) -> None:
    for spliced, mapped in recorded(ledger, batch, actor, reason):
        assert spliced == mapped


def test_the_splice_is_used_and_a_mismatch_falls_back(ledger: Ledger) -> None:
    batch = [{"role": "user", "content": 'hé \u0000 "quoted" [] {}'}]
    _, dicts, bodies = ledger._parse_messages(batch, allow_empty=False)
    audit = {"actor": "a", "reason": None, "idempotency_key": None, "request_digest": None}
    session = Session(tenant="t", key="k", **audit)
    session.append(dicts, **audit)
    appended = session.collect_events()[-1]
    calls: list[object] = []
    mapper = ledger.mapper
    original = mapper.to_stored_event
    mapper.to_stored_event = lambda e: calls.append(e) or original(e)  # type: ignore[method-assign]
    try:
        assert ledger._stored_event(appended, bodies) == original(appended)
        assert calls == []  # spliced, not encoded by the mapper
        # Bodies that do not match the event's messages one for one are not used.
        assert ledger._stored_event(appended, ()) == original(appended)
        assert ledger._stored_event(appended, (*bodies, *bodies)) == original(appended)
        assert len(calls) == 2
    finally:
        del mapper.to_stored_event
