"""An append to a session the process holds takes the store's short path
(`AppendsRows.append_rows`): it must store exactly what the general write path stores
(the same event records, byte for byte, and the same view rows), and hand over to the
general path, having stored nothing, wherever that path has work the short one does not
do: an idempotency key, a session not cached, a chain head the store does not hold, a
stale expected version, another writer first."""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.domain import CanCreateTimestamp
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_ledger.domain.errors import (
    InvalidInput,
    InvalidMessage,
    MessageNotFound,
    VersionConflict,
)
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from session_ledger.projections.sqlite import SQLiteLedgerRecorder
from tests.conftest import make_ledger, make_settings

TEXT = st.sampled_from(["hi", "a b", "", "x y z", "😀", 'q "uoted" \\ \u0000'])
MSG = st.one_of(
    st.builds(
        lambda r, t: {"role": r, "content": t},
        st.sampled_from(["user", "assistant", "tool", "system"]),
        TEXT,
    ),
    st.builds(  # not a plain text: its canonical JSON is stored
        lambda t: {"role": "tool", "content": t, "additional_kwargs": {"tool_call_id": "c1"}},
        TEXT,
    ),
)
AUDIT = st.fixed_dictionaries({}, optional={"actor": st.sampled_from(["agent", "ops"]),
                                            "reason": st.sampled_from(["why", None])})  # fmt: skip
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("put"), MSG, AUDIT),
        st.tuples(st.just("put_messages"), st.lists(MSG, min_size=1, max_size=4), AUDIT),
        st.tuples(st.just("set"), st.lists(MSG, max_size=3), AUDIT),
        st.tuples(st.just("reset"), st.none(), AUDIT),
        st.tuples(st.just("delete_last_message"), st.none(), AUDIT),
        st.tuples(st.just("archive_oldest"), st.integers(1, 2), AUDIT),
        st.tuples(st.just("idempotent put"), MSG, AUDIT),
        st.tuples(st.just("forget chain heads"), st.none(), AUDIT),
    ),
    min_size=1,
    max_size=14,
)
TABLES = ("ledger_sessions", "ledger_messages", "ledger_ended_messages", "ledger_timeline")


@pytest.fixture
def fixed_clock(monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """Event times from a counter the test restarts, so two ledgers record the same."""
    start = datetime(2026, 1, 1, tzinfo=UTC)
    ticks = itertools.count()

    def restart() -> None:
        nonlocal ticks
        ticks = itertools.count()

    monkeypatch.setattr(
        CanCreateTimestamp,
        "create_timestamp",
        staticmethod(lambda: start + timedelta(microseconds=next(ticks))),
    )
    yield restart


class Spy:
    """Counts the short path's appends that stored (True) and that handed over (False)."""

    def __init__(self, recorder: Any) -> None:
        self.stored = self.handed_over = 0
        self.recorder = recorder
        original = recorder.append_rows

        def append_rows(record: Any, append: Any) -> bool:
            done: bool = original(record, append)
            self.stored += done
            self.handed_over += not done
            return done

        recorder.append_rows = append_rows


def apply(ledger: Ledger, key: str, ops: list[Any], counter: Iterator[int]) -> None:
    for op, arg, audit in ops:
        if op == "put":
            ledger.put(key, arg, **audit)
        elif op == "put_messages":
            ledger.put_messages(key, arg, **audit)
        elif op == "set":
            ledger.set(key, arg, **audit)
        elif op == "reset":
            ledger.reset(key, **audit)
        elif op == "delete_last_message":
            with contextlib.suppress(MessageNotFound):  # an empty history: on both paths
                ledger.delete_last_message(key, **audit)
        elif op == "archive_oldest":
            ledger.archive_oldest(key, arg, **audit)
        elif op == "idempotent put":
            ledger.put(key, arg, idempotency_key=f"k{next(counter)}", **audit)
        elif op == "forget chain heads":
            ledger.recorder.chain_heads.clear()  # type: ignore[attr-defined]


def stored(ledger: Ledger) -> dict[str, list[tuple[Any, ...]]]:
    recorder: Any = ledger.recorder
    out = {table: list(recorder.dump(table)) for table in TABLES}
    with recorder.datastore.transaction(commit=False) as c:
        c.execute(
            "SELECT originator_id, originator_version, topic, state FROM ledger_events"
            " ORDER BY originator_id, originator_version"
        )
        out["ledger_events"] = [tuple(r) for r in c.fetchall()]
    return out


@pytest.mark.parametrize("store", ["memory", "sqlite"])
@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_the_short_path_stores_what_the_general_path_stores(
    store: str, tmp_path_factory: pytest.TempPathFactory, fixed_clock: Any, ops: list[Any]
) -> None:
    results = []
    for short in (False, True):
        fixed_clock()
        tmp = tmp_path_factory.mktemp("short" if short else "general")
        ledger = make_ledger(make_settings(store, tmp, default_tenant="t", snapshot_interval=3))
        try:
            if not short:
                ledger._appender = None  # every write through _write
            else:
                spy = Spy(ledger.recorder)
            apply(ledger, "k", [("put", {"role": "user", "content": "first"}, {}), *ops],
                  itertools.count())  # fmt: skip
            results.append(stored(ledger))
            assert ledger.verify("k").intact
        finally:
            ledger.close()
    general, short_path = results
    first_differences = [
        (table, g, s)
        for table in general
        for g, s in zip(general[table], short_path[table], strict=False)
        if g != s
    ][:2]
    assert short_path == general, first_differences
    appends = sum(op in ("put", "put_messages") for op, _, _ in ops)
    assert spy.stored + spy.handed_over <= appends
    if ops[0][0] in ("put", "put_messages"):  # the session is cached and its head held
        assert spy.stored >= 1


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Iterator[Ledger]:
    ledger = make_ledger(make_settings("sqlite", tmp_path))
    yield ledger
    ledger.close()


def test_appends_take_the_short_path_once_the_session_is_held(sqlite_ledger: Ledger) -> None:
    spy = Spy(sqlite_ledger.recorder)
    sqlite_ledger.put("k", {"role": "user", "content": "one"})  # not cached yet: general
    assert (spy.stored, spy.handed_over) == (0, 0)
    for i in range(5):
        result = sqlite_ledger.put("k", {"role": "user", "content": f"m{i}"})
        assert (result.version, result.message_count) == (i + 3, i + 2)
    assert (spy.stored, spy.handed_over) == (5, 0)
    assert [m.content for m in sqlite_ledger.get_all("k")] == ["one", *(f"m{i}" for i in range(5))]
    assert sqlite_ledger.verify("k").intact


def test_another_writer_first_hands_over_and_reloads(tmp_path: Path) -> None:
    settings_ = make_settings("sqlite", tmp_path)
    first, second = make_ledger(settings_), make_ledger(settings_)
    try:
        first.put("k", {"role": "user", "content": "a"})
        first.put("k", {"role": "user", "content": "b"})
        second.put("k", {"role": "user", "content": "c"})  # version 4, written elsewhere
        spy = Spy(first.recorder)
        result = first.put("k", {"role": "user", "content": "d"})  # its cache says 3
        assert (result.version, result.message_count) == (5, 4)
        assert spy.stored == 0  # the short path lost the race and handed over
        assert [m.content for m in first.get_all("k")] == ["a", "b", "c", "d"]
        assert first.put("k", {"role": "user", "content": "e"}).version == 6
        assert spy.stored == 1  # the general path left the session and its head held
        assert first.verify("k").intact and second.verify("k").intact
    finally:
        first.close()
        second.close()


def test_expected_versions_on_the_short_path(sqlite_ledger: Ledger) -> None:
    sqlite_ledger.put("k", {"role": "user", "content": "a"})
    spy = Spy(sqlite_ledger.recorder)
    assert sqlite_ledger.put("k", {"role": "user", "content": "b"}, expected_version=2).version == 3
    assert spy.stored == 1
    with pytest.raises(VersionConflict) as raised:
        sqlite_ledger.put("k", {"role": "user", "content": "c"}, expected_version=2)
    assert (raised.value.expected, raised.value.actual) == (2, 3)
    assert [m.content for m in sqlite_ledger.get_all("k")] == ["a", "b"]
    assert spy.stored == 1


def test_an_idempotent_retry_is_recognised(sqlite_ledger: Ledger) -> None:
    sqlite_ledger.put("k", {"role": "user", "content": "a"})
    spy = Spy(sqlite_ledger.recorder)
    once = sqlite_ledger.put("k", {"role": "user", "content": "b"}, idempotency_key="x")
    again = sqlite_ledger.put("k", {"role": "user", "content": "b"}, idempotency_key="x")
    assert (once.version, again.version, again.replayed) == (3, 3, True)
    assert spy.stored + spy.handed_over == 0  # the key's lookup is the general path's
    assert len(sqlite_ledger.get_all("k")) == 2


def test_snapshots_are_taken_on_the_short_path(tmp_path: Path) -> None:
    ledger = make_ledger(make_settings("sqlite", tmp_path, snapshot_interval=4))
    try:
        ledger.put("k", {"role": "user", "content": "a"})  # versions 1 and 2
        spy = Spy(ledger.recorder)
        for i in range(6):
            ledger.put("k", {"role": "user", "content": str(i)})  # versions 3 to 8
        assert spy.stored == 6
        sid = session_id(ledger.default_tenant, "k")
        assert ledger.snapshots is not None
        versions = [s.originator_version for s in ledger.snapshots.recorder.select_events(sid)]
        assert versions == [4, 8]
        reloaded = ledger.repository.get(sid)
        assert (reloaded.version, reloaded.message_count) == (8, 7)
    finally:
        ledger.close()


def test_bad_input_stores_nothing_on_either_path(sqlite_ledger: Ledger) -> None:
    sqlite_ledger.put("k", {"role": "user", "content": "a"})
    before = stored(sqlite_ledger)
    for bad in ({"role": "wizard", "content": "x"}, {"role": "user", "content": "\ud800"}):
        with pytest.raises(InvalidMessage):
            sqlite_ledger.put("k", bad)
    with pytest.raises(InvalidInput, match="actor"):
        sqlite_ledger.put("k", {"role": "user", "content": "x"}, actor="\u0000")
    with pytest.raises(InvalidInput, match="expected_version"):
        sqlite_ledger.put("k", {"role": "user", "content": "x"}, expected_version=-1)
    assert stored(sqlite_ledger) == before


@pytest.mark.parametrize("store", ["memory", "sqlite", "postgres"])
def test_which_stores_have_the_short_path(store: str, tmp_path: Path) -> None:
    ledger = make_ledger(make_settings(store, tmp_path))
    try:
        short = ledger._appender is not None
        assert short == isinstance(ledger.recorder, SQLiteLedgerRecorder) == (store != "postgres")
        ledger.put("k", {"role": "user", "content": "a"})
        ledger.put("k", {"role": "user", "content": "b"})
        assert [m.content for m in ledger.get_all("k")] == ["a", "b"]
    finally:
        ledger.close()
