"""Invariant 1: the views equal the canonical replay, now and at every past version;
invariant 2 at every past version: get(as_of=v) is ChatMemoryBuffer.get over replay(v)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_ledger.domain.errors import MessageNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from tests.conftest import make_ledger, make_settings
from tests.reference_replay import replay
from tests.unit.test_window_matches_llamaindex import as_llamaindex, llamaindex_window

TEXT = st.sampled_from(["hi", "a b", "", "x y z", "😀"])
MSG = st.builds(
    lambda r, t: {"role": r, "content": t}, st.sampled_from(["user", "assistant", "tool"]), TEXT
)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), MSG),
        st.tuples(st.just("put_messages"), st.lists(MSG, min_size=1, max_size=4)),
        st.tuples(st.just("set"), st.lists(MSG, max_size=4)),
        st.tuples(st.just("reset"), st.none()),
        st.tuples(st.just("delete_message"), st.integers(-3, 3)),
        st.tuples(st.just("archive_oldest"), st.integers(1, 3)),
    ),
    min_size=1,
    max_size=12,
)


@pytest.fixture(scope="module", params=["memory", "sqlite", "postgres"])
def shared_ledger(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Ledger]:
    ledger = make_ledger(make_settings(request.param, tmp_path_factory.mktemp("replay")))
    yield ledger
    ledger.close()


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS, key=st.uuids().map(str))
def test_views_equal_replay_after_random_writes(shared_ledger: Ledger, ops: list, key: str) -> None:  # type: ignore[type-arg]
    ledger = shared_ledger
    ledger.put(key, {"role": "system", "content": "start"})
    for name, arg in ops:
        try:
            if name == "reset":
                ledger.reset(key)
            else:
                getattr(ledger, name)(key, arg)
        except MessageNotFound:
            pass
    replayed = replay(ledger.events.get(session_id(ledger.default_tenant, key)))
    head = ledger.head(key)
    assert ledger.get_all(key) == replayed.messages
    assert ledger.get_all(key, status="archived") == replayed.archived_messages
    assert head.version == replayed.version
    assert (head.message_count, head.archived_count) == (
        len(replayed.active),
        len(replayed.archived),
    )
    expected_tokens = sum(len(str(m.content).split()) for m in replayed.messages)
    assert head.token_total == expected_tokens

    events = list(ledger.events.get(session_id(ledger.default_tenant, key)))
    for v in range(1, head.version + 1):
        then = replay(events, v)
        assert ledger.get_all(key, as_of_version=v) == then.messages, f"version {v}"
        assert ledger.get_all(key, as_of_version=v, status="archived") == then.archived_messages
        for limit in (1, 3, 8):
            expected = llamaindex_window([m.to_dict() for m in then.messages], limit, 0, str.split)
            assert as_llamaindex(ledger.get(key, token_limit=limit, as_of_version=v)) == expected
