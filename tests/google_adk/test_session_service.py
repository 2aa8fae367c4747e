"""LedgerSessionService keeps ADK's BaseSessionService contract (the behaviours ADK's
own tests check, tests/sdk_suites), in process on SQLite and PostgreSQL and over HTTP,
and keeps what ADK's database service throws away: every event, every state change and
the deletion itself, in the audit trail."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import Any, TypeVar

import pytest
from google.adk.errors._stale_session_error import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from session_ledger.api.google_adk import LedgerSessionService, to_message
from session_ledger.domain.errors import InvalidInput, InvalidMessage, PayloadTooLarge
from tests.google_adk.conftest import Target

T = TypeVar("T")
USER = "user-1"


def run(coroutine: Coroutine[Any, Any, T]) -> T:
    return asyncio.run(coroutine)


def text_event(text: str, *, author: str = "user", **kwargs: Any) -> Event:
    content = types.Content(role="user" if author == "user" else "model",
                            parts=[types.Part(text=text)])  # fmt: skip
    return Event(invocation_id="inv", author=author, content=content, **kwargs)


def delta(**state: Any) -> EventActions:
    return EventActions(state_delta=state)


def test_create_get_list_and_delete(adk: Target) -> None:
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, state={"k": "v"})
        assert made.id and made.state == {"k": "v"} and made.events == []
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert got == made
        await sessions.create_session(app_name=adk.app, user_id="other", session_id="s/2 ü")
        with pytest.raises(AlreadyExistsError):
            await sessions.create_session(app_name=adk.app, user_id="other", session_id="s/2 ü")
        mine = await sessions.list_sessions(app_name=adk.app, user_id=USER)
        assert [s.id for s in mine.sessions] == [made.id]
        every = await sessions.list_sessions(app_name=adk.app)
        assert {(s.user_id, s.id) for s in every.sessions} == {(USER, made.id), ("other", "s/2 ü")}
        await sessions.delete_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert (
            await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id) is None
        )
        assert [s.id for s in (await sessions.list_sessions(app_name=adk.app)).sessions] == [
            "s/2 ü"
        ]
        # A deleted id can be made again: a new session, none of the old one's state
        again = await sessions.create_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert again.state == {}

    run(scenario())


def test_state_scopes_are_shared_as_adk_defines_and_temp_is_never_stored(adk: Target) -> None:
    sessions = adk.service()

    async def scenario() -> None:
        s1 = await sessions.create_session(
            app_name=adk.app, user_id="u1", session_id="s1",
            state={"app:a": 1, "user:u": 2, "sk": 3, "temp:t": 4},
        )  # fmt: skip
        assert s1.state == {"app:a": 1, "user:u": 2, "sk": 3}
        changes = delta(**{"app:b": 5, "user:v": 6, "sk2": 7, "temp:x": 8})
        event = Event(invocation_id="i", author="agent", actions=changes)
        await sessions.append_event(s1, event)
        assert s1.state["temp:x"] == 8  # (in memory, for the rest of the invocation)
        assert "temp:x" not in event.actions.state_delta
        same_user = await sessions.create_session(app_name=adk.app, user_id="u1", session_id="s2")
        assert same_user.state == {"app:a": 1, "app:b": 5, "user:u": 2, "user:v": 6}
        other_user = await sessions.create_session(app_name=adk.app, user_id="u2")
        assert other_user.state == {"app:a": 1, "app:b": 5}
        got = await sessions.get_session(app_name=adk.app, user_id="u1", session_id="s1")
        assert got is not None
        assert got.state == {"app:a": 1, "app:b": 5, "user:u": 2, "user:v": 6, "sk": 3, "sk2": 7}
        assert await sessions.get_user_state(app_name=adk.app, user_id="u1") == {"u": 2, "v": 6}

    run(scenario())
    stored = adk.ledger.get_all(adk.key("u1", "s1"), tenant=adk.tenant)
    assert "temp:" not in str([m.to_dict() for m in stored])


def test_get_session_config_recent_events_and_after_timestamp(adk: Target) -> None:
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, state={"n": 0})
        for config in ({"num_recent_events": 3}, {"num_recent_events": 0}, {"after_timestamp": 1}):
            empty = await sessions.get_session(
                app_name=adk.app, user_id=USER, session_id=made.id,
                config=GetSessionConfig(**config),
            )  # fmt: skip
            assert empty is not None and (empty.events, empty.state) == ([], {"n": 0})
        for i in range(1, 8):
            changes = delta(n=i) if i == 3 else None
            extra = {"actions": changes} if changes else {}
            await sessions.append_event(made, text_event(f"e{i}", timestamp=float(i), **extra))

        async def texts(**config: Any) -> tuple[list[str], dict[str, Any]]:
            got = await sessions.get_session(
                app_name=adk.app, user_id=USER, session_id=made.id,
                config=GetSessionConfig(**config),
            )  # fmt: skip
            assert got is not None and got.last_update_time == 7.0
            return [e.content.parts[0].text for e in got.events], got.state

        assert (await texts())[0] == [f"e{i}" for i in range(1, 8)]
        assert await texts(num_recent_events=0) == ([], {"n": 3})
        # The state was set three events before the window: still read
        assert await texts(num_recent_events=2) == (["e6", "e7"], {"n": 3})
        assert (await texts(num_recent_events=100))[0] == [f"e{i}" for i in range(1, 8)]
        assert (await texts(after_timestamp=5.0))[0] == ["e5", "e6", "e7"]
        assert (await texts(after_timestamp=70.0))[0] == []
        assert (await texts(after_timestamp=5.0, num_recent_events=2))[0] == ["e6", "e7"]

    run(scenario())


def read_long_session(
    adk: Target, sessions: LedgerSessionService, events: int, config: GetSessionConfig,
    count_reads: Callable[[], None],
) -> list[Event]:  # fmt: skip
    """Session "long" made, `events` events stamped 1, 2, ... written to it in process
    (500 a write), then `count_reads()`, then the events `get_session(config)` gives."""
    key = adk.key(USER, "long")

    async def scenario() -> list[Event]:
        await sessions.create_session(app_name=adk.app, user_id=USER, session_id="long")
        for start in range(1, events + 1, 500):
            adk.ledger.put_messages(key, [
                to_message(text_event(f"e{i}", timestamp=float(i)), {"adk_state_at": 0})
                for i in range(start, min(start + 500, events + 1))
            ], tenant=adk.tenant)  # fmt: skip
        count_reads()
        got = await sessions.get_session(
            app_name=adk.app, user_id=USER, session_id="long", config=config
        )
        assert got is not None
        return got.events

    return run(scenario())


@pytest.mark.parametrize(
    ("after", "newest_reads"),
    [
        (240.0, [(100, 0)]),
        (60.0, [(100, 0), (200, 100)]),
        (0.0, [(100, 0), (200, 100), (251, 200)]),
    ],
    ids=["one-page", "twice-as-many", "all"],
)
def test_after_timestamp_reads_back_only_as_far_as_it_needs(
    adk: Target, after: float, newest_reads: list[tuple[int, int]]
) -> None:
    """Of 250 events, those from `after` on: the newest 100, then the newest twice as
    many less those already read, until an older one is among them or the session is
    read whole; never a read from an offset but the state's (the first message, which
    the session was made with). Over HTTP the same reads, each made by offset."""
    sessions = adk.service()
    reads: list[tuple[str, Any]] = []
    store = sessions.store
    messages, newest = store.messages, store.newest

    def counted_messages(key: str, offset: int, limit: int | None) -> Any:
        if key == adk.key(USER, "long"):  # (not the app's and the user's state)
            reads.append(("offset", (offset, limit)))
        return messages(key, offset, limit)

    def counted_newest(key: str, head: Any, n: int, skip: int = 0) -> Any:
        if key == adk.key(USER, "long"):
            reads.append(("newest", (n, skip)))
        return newest(key, head, n, skip)

    def count_reads() -> None:
        store.messages = counted_messages  # type: ignore[method-assign]
        store.newest = counted_newest  # type: ignore[method-assign]

    events = read_long_session(
        adk, sessions, 250, GetSessionConfig(after_timestamp=after), count_reads
    )
    assert [e.timestamp for e in events] == [float(i) for i in range(max(1, int(after)), 251)]
    state_read = [] if after == 0.0 else [("offset", (0, 1))]  # (read whole: it is in it)
    if adk.remote:  # (where `newest` is itself a read by offset)
        reads = [r for r in reads if r[0] == "newest"] + state_read
    assert reads == [("newest", read) for read in newest_reads] + state_read


def test_the_newest_rows_but_those_read_are_of_the_head_or_refused(adk: Target) -> None:
    """`newest(n, skip)`: the newest n rows at the head but the newest `skip`. After an
    append, in process the version has moved (refused: the service reads again); over
    HTTP, where no version is named, those positions hold the same rows. Once the
    session is cleared, both refuse."""
    store, key = adk.service().store, adk.key(USER, "s")
    adk.ledger.put_messages(key, [
        to_message(text_event(f"e{i}", timestamp=float(i)), {"adk_state_at": 0})
        for i in range(10)
    ], tenant=adk.tenant)  # fmt: skip
    head = store.head(key)
    assert head is not None

    def stamps(found: list[dict[str, Any]] | None) -> list[float] | None:
        return None if found is None else [
            m["additional_kwargs"]["adk_event"]["timestamp"] for m in found
        ]  # fmt: skip

    assert stamps(store.newest(key, head, 5, skip=2)) == [5.0, 6.0, 7.0]
    assert stamps(store.newest(key, head, 10, skip=0)) == [float(i) for i in range(10)]
    store.append(key, [to_message(text_event("e10", timestamp=10.0), {"adk_state_at": 0})],
                 head.version)  # fmt: skip
    assert stamps(store.newest(key, head, 5, skip=2)) == ([5.0, 6.0, 7.0] if adk.remote else None)
    assert store.newest(key, head, 5) is None  # (a page from that position holds 6)
    store.clear(key, None)
    assert store.newest(key, head, 5, skip=2) is None


def test_recent_events_are_one_read_of_the_newest_rows(adk: Target) -> None:
    """`num_recent_events=50` of 2,000 events asks the ledger for the newest 50 (a read of
    50 rows, tests/contract/test_newest_messages.py), not for those after an offset,
    which the database steps through from the first."""
    if adk.remote:
        pytest.skip("over HTTP the read is by offset, checked by the answer's length")
    sessions = adk.service()
    ledger = sessions.store.ledger  # type: ignore[attr-defined]
    key, reads = adk.key(USER, "long"), []
    history = ledger.history

    def counted(read_key: str, **kw: Any) -> Any:
        if read_key == key:
            reads.append({k: v for k, v in kw.items() if k in ("offset", "last") and v})
        return history(read_key, **kw)

    def count_reads() -> None:
        ledger.history = counted

    events = read_long_session(
        adk, sessions, 2000, GetSessionConfig(num_recent_events=50), count_reads
    )
    assert [e.timestamp for e in events] == [float(i) for i in range(1951, 2001)]
    # (A first read at the head the service remembered from create_session finds the
    # session moved, and it reads again at the new head.)
    assert reads[-2:] == [{"last": 50}, {}]  # the newest 50, then the state's, the first
    assert all("offset" not in r for r in reads)


def test_a_stale_session_is_refused_and_nothing_is_stored(adk: Target) -> None:
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER)
        await sessions.append_event(made, text_event("one", actions=delta(k=1)))
        fresh = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert fresh is not None
        stale_a, stale_b = fresh.model_copy(deep=True), fresh.model_copy(deep=True)
        stale_a._storage_update_marker = stale_b._storage_update_marker = (
            fresh._storage_update_marker
        )
        results = await asyncio.gather(
            sessions.append_event(stale_a, text_event("a", actions=delta(k="a"))),
            sessions.append_event(stale_b, text_event("b", actions=delta(k="b"))),
            return_exceptions=True,
        )
        refused = [r for r in results if isinstance(r, Exception)]
        assert len(refused) == 1 and isinstance(refused[0], StaleSessionError)
        assert "modified in storage" in str(refused[0])
        with pytest.raises(StaleSessionError):
            await sessions.append_event(made, text_event("late"))
        final = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert final is not None
        assert [e.content.parts[0].text for e in final.events] in (["one", "a"], ["one", "b"])
        assert final.state["k"] == final.events[-1].content.parts[0].text
        # A session made by hand (no marker) that holds the newest stored event appends
        by_hand = final.model_copy(deep=True)
        by_hand._storage_update_marker = None
        await sessions.append_event(by_hand, text_event("by hand"))
        # ... and one that does not hold it is stale
        behind = final.model_copy(deep=True)
        behind._storage_update_marker = None
        behind.last_update_time = 0.0
        with pytest.raises(StaleSessionError):
            await sessions.append_event(behind, text_event("behind", timestamp=1.0))
        await sessions.delete_session(app_name=adk.app, user_id=USER, session_id=made.id)
        with pytest.raises(SessionNotFoundError):
            await sessions.append_event(by_hand, text_event("after delete"))

    run(scenario())


def test_appends_at_once_to_one_session_are_all_kept_in_turn_and_a_repeat_once(
    adk: Target,
) -> None:
    """As ADK's database service (which takes one session's appends in turn, and stores
    an event id once in a session): ten appends at once on one session object are all
    stored, in the order made; the same event appended again is stored once, and another
    event with its id is refused, nothing stored."""
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER)
        events = [text_event(f"e{i}", actions=delta(n=i)) for i in range(10)]
        results = await asyncio.gather(*(sessions.append_event(made, e) for e in events),
                                       return_exceptions=True)  # fmt: skip
        assert [r for r in results if isinstance(r, BaseException)] == []
        again = await asyncio.gather(sessions.append_event(made, events[3]),
                                     sessions.append_event(made, events[3]))  # fmt: skip
        assert again == [events[3], events[3]]
        namesake = text_event("another", id=events[3].id)
        with pytest.raises(AlreadyExistsError, match=events[3].id):
            await sessions.append_event(made, namesake)
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert got is not None
        texts = [e.content.parts[0].text for e in got.events]  # type: ignore[union-attr, index]
        assert texts == [f"e{i}" for i in range(10)]
        assert [e.content.parts[0].text for e in made.events] == texts  # type: ignore[union-attr, index]
        assert got.state["n"] == 9

    run(scenario())


def test_an_append_made_again_after_its_answer_was_lost_answers_as_the_first(
    adk: Target,
) -> None:
    """A caller whose append was stored but whose answer never came (a timeout over
    HTTP) makes it again with the session object as it was: the first write answers
    (no second event, no stale-session error), the object moves on as after one append,
    and its app: and user: changes are made (again: to the same values)."""
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER)
        lost = made.model_copy(deep=True)  # (the object as it was before the append)
        assert lost._storage_update_marker == made._storage_update_marker
        event = text_event("once", actions=delta(**{"n": 1, "user:seen": True, "app:hits": 1}))
        await sessions.append_event(made, event)
        assert await sessions.append_event(lost, event) == event
        assert [e.id for e in lost.events] == [event.id]
        assert lost._storage_update_marker == made._storage_update_marker
        assert lost.state == made.state == {"n": 1, "user:seen": True, "app:hits": 1}
        await sessions.append_event(lost, text_event("next"))  # (not stale)
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert got is not None
        assert [e.id for e in got.events] == [event.id, lost.events[-1].id]
        assert got.state == {"n": 1, "user:seen": True, "app:hits": 1}
        kinds = [e.event_type for e in adk.ledger.audit(adk.key(USER, made.id))]
        # The session's first message, the event and the next: the retry added none
        assert kinds.count("MessagesAppended") == 3

    run(scenario())


def test_an_event_stored_before_the_session_was_read_is_not_stored_again(adk: Target) -> None:
    """A session read without its events (`num_recent_events=0`) and an event it already
    holds appended to it: nothing is stored and the object stays as read. (An id that
    is not plain ASCII is its write's key by its digest.)"""
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER)
        event = text_event("stored", id="évènement 1")
        await sessions.append_event(made, event)
        read = await sessions.get_session(
            app_name=adk.app, user_id=USER, session_id=made.id,
            config=GetSessionConfig(num_recent_events=0),
        )  # fmt: skip
        assert read is not None and read.events == []
        marker = read._storage_update_marker
        assert await sessions.append_event(read, event) == event
        assert read.events == [] and read._storage_update_marker == marker
        await sessions.append_event(read, text_event("after"))  # (not stale)
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert got is not None
        assert [e.content.parts[0].text for e in got.events] == ["stored", "after"]  # type: ignore[union-attr, index]

    run(scenario())


def test_a_deleted_sessions_event_ids_are_free_in_the_session_made_again(adk: Target) -> None:
    """As ADK's services: a session deleted and made again under its id takes events
    with the ids the deleted one held, the same events or others; each is stored once
    in the new session (a retry whose answer was lost answers as the first), and an id
    it holds is refused for another event, as before."""
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="life")
        first, second = text_event("one", id="evt-1"), text_event("two", id="evt-2")
        for event in (first, second):
            await sessions.append_event(made, event)
        await sessions.delete_session(app_name=adk.app, user_id=USER, session_id="life")
        again = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="life")
        lost = again.model_copy(deep=True)
        await sessions.append_event(again, first)  # the same event
        assert await sessions.append_event(lost, first) == first  # its retry
        other = text_event("not two", id="evt-2")  # another event, a used id
        await sessions.append_event(again, other)
        with pytest.raises(AlreadyExistsError, match="evt-2"):
            await sessions.append_event(again, text_event("three", id="evt-2"))
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id="life")
        assert got is not None
        assert [(e.id, e.content.parts[0].text) for e in got.events] == [  # type: ignore[union-attr, index]
            ("evt-1", "one"),
            ("evt-2", "not two"),
        ]
        assert [e.id for e in again.events] == ["evt-1", "evt-2"]
        # Read without its events, the new session's own event is not stored again
        read = await sessions.get_session(
            app_name=adk.app, user_id=USER, session_id="life",
            config=GetSessionConfig(num_recent_events=0),
        )  # fmt: skip
        assert read is not None
        assert await sessions.append_event(read, first) == first and read.events == []
        kinds = [e.event_type for e in adk.ledger.audit(adk.key(USER, "life"))]
        assert kinds.count("MessagesAppended") == 3 + 3  # each life: its first message, two events

    run(scenario())


def test_a_cancelled_append_is_settled_before_the_next_in_turn(adk: Target) -> None:
    """A caller cancelled while its append is being stored: the append is stored and the
    session object left as it should be before the next append in turn reads it."""
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER)
        first = asyncio.ensure_future(sessions.append_event(made, text_event("first")))
        await asyncio.sleep(0)  # (the append has started)
        first.cancel()
        second = await sessions.append_event(made, text_event("second"))
        with pytest.raises(asyncio.CancelledError):
            await first
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=made.id)
        assert got is not None and got.events[-1].id == second.id
        assert [e.content.parts[0].text for e in got.events] == ["first", "second"]  # type: ignore[union-attr, index]

    run(scenario())


def test_delete_session_is_an_event_and_replay_keeps_the_events(adk: Target) -> None:
    sessions = adk.service()
    key = adk.key(USER, "kept")

    async def write() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="kept")
        await sessions.append_event(made, text_event("hello"))
        await sessions.append_event(made, text_event("hi there", author="agent"))

    run(write())
    before = adk.ledger.head(key, tenant=adk.tenant).version
    run(sessions.delete_session(app_name=adk.app, user_id=USER, session_id="kept"))
    trail = adk.ledger.audit(key, tenant=adk.tenant)
    assert [e.event_type for e in trail][-1] == "HistoryCleared"
    assert adk.ledger.get_all(key, tenant=adk.tenant) == []
    replayed = adk.ledger.get_all(key, tenant=adk.tenant, as_of_version=before)
    texts = [m.additional_kwargs["adk_event"]["content"]["parts"][0]["text"]
             for m in replayed if "adk_event" in m.additional_kwargs]  # fmt: skip
    assert texts == ["hello", "hi there"]
    assert adk.ledger.verify(key, tenant=adk.tenant).first_bad_version is None


def test_each_event_is_one_ledger_event_kept_whole_and_shown_readably(adk: Target) -> None:
    sessions = adk.service()
    call = types.FunctionCall(id="c1", name="weather", args={"city": "Zürich"})
    answer = types.FunctionResponse(id="c1", name="weather", response={"result": "sunny"})
    events = [
        text_event("weather Zürich"),
        Event(invocation_id="i", author="bot", content=types.Content(role="model", parts=[
            types.Part(text="thinking...", thought=True), types.Part(function_call=call)]),
            long_running_tool_ids={"c1"}, branch="a.b",
            usage_metadata=types.GenerateContentResponseUsageMetadata(total_token_count=3)),
        Event(invocation_id="i", author="bot", content=types.Content(role="user", parts=[
            types.Part(function_response=answer),
            types.Part.from_bytes(data=b"\x00\xffpng", mime_type="image/png")]),
            actions=EventActions(artifact_delta={"f": 1}, transfer_to_agent="other",
                                 state_delta={"k": [1, {"x": None}]}),
            custom_metadata={"ü": "✓"}, error_code="E", interrupted=True),
    ]  # fmt: skip

    async def scenario() -> list[Event]:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="whole")
        for event in events:
            await sessions.append_event(made, event)
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id="whole")
        assert got is not None
        return got.events

    assert run(scenario()) == events
    key = adk.key(USER, "whole")
    trail = adk.ledger.audit(key, tenant=adk.tenant)
    assert [e.event_type for e in trail] == ["SessionStarted"] + ["MessagesAppended"] * 4
    stored = adk.ledger.get_all(key, tenant=adk.tenant)[1:]
    assert [m.additional_kwargs["adk_event"] for m in stored] == [
        e.model_dump(mode="json", exclude_none=True) for e in events
    ]
    assert [m.role for m in stored] == ["user", "assistant", "tool"]
    assert stored[0].content == "weather Zürich"
    assert [b["block_type"] for b in stored[1].blocks] == ["thinking", "tool_call"]
    assert stored[1].blocks[1]["tool_name"] == "weather"
    assert stored[1].blocks[1]["tool_kwargs"] == {"city": "Zürich"}
    assert "sunny" in stored[2].blocks[0]["text"]


def test_app_state_changes_from_two_services_at_once_are_all_kept(adk: Target) -> None:
    one, two = adk.service(), adk.service()

    async def scenario() -> dict[str, Any]:
        a = await one.create_session(app_name=adk.app, user_id="u1")
        b = await two.create_session(app_name=adk.app, user_id="u2")
        for i in range(5):
            await asyncio.gather(
                one.append_event(a, Event(author="x", actions=delta(**{f"app:a{i}": i}))),
                two.append_event(b, Event(author="y", actions=delta(**{f"app:b{i}": i}))),
            )
        got = await one.get_session(app_name=adk.app, user_id="u1", session_id=a.id)
        assert got is not None
        return got.state

    state = run(scenario())
    assert state == {**{f"app:a{i}": i for i in range(5)}, **{f"app:b{i}": i for i in range(5)}}


def test_bad_input_is_a_typed_error_and_stores_nothing(adk: Target) -> None:
    sessions = adk.service()

    async def scenario() -> None:
        with pytest.raises(InvalidInput):
            await sessions.create_session(app_name=adk.app, user_id=7)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            await sessions.create_session(app_name=adk.app, user_id=USER, state=[1])  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            await sessions.create_session(app_name=adk.app, user_id=USER, session_id=5)  # type: ignore[arg-type]
        for none in (None, "", "  "):  # no session has such an id: none, as ADK's read it
            got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=none)  # type: ignore[arg-type]
            assert got is None
            await sessions.delete_session(app_name=adk.app, user_id=USER, session_id=none)  # type: ignore[arg-type]
        with pytest.raises(InvalidInput):
            await sessions.list_sessions(app_name=adk.app, user_id=3)  # type: ignore[arg-type]
        with pytest.raises(ValueError):
            GetSessionConfig(num_recent_events=-1)
        assert (await sessions.list_sessions(app_name=adk.app)).sessions == []

    run(scenario())
    assert adk.ledger.keys(tenant=adk.tenant, prefix=f"adk/{adk.app}/") == []
    with pytest.raises(InvalidInput):
        LedgerSessionService()
    with pytest.raises(InvalidInput):
        LedgerSessionService(url="http://127.0.0.1:1", api_key="k", tenant="t")


def test_what_one_service_knows_never_hides_what_another_wrote(adk: Target) -> None:
    one, two = adk.service(), adk.service()
    last = GetSessionConfig(num_recent_events=1)

    async def scenario() -> None:
        async def get(service: LedgerSessionService, config: GetSessionConfig = last) -> Any:
            got = await service.get_session(
                app_name=adk.app, user_id=USER, session_id="s", config=config
            )
            assert got is not None
            return got

        made = await one.create_session(
            app_name=adk.app, user_id=USER, session_id="s", state={"k": [1]}
        )
        await one.append_event(made, text_event("one"))
        (await get(one)).state["k"].append(2)  # a caller changing what it was given
        assert (await get(one)).state == {"k": [1]}
        await two.append_event(await get(two), Event(author="x", actions=delta(k=[3])))
        assert (await get(one)).state == {"k": [3]}
        await two.delete_session(app_name=adk.app, user_id=USER, session_id="s")
        await two.create_session(app_name=adk.app, user_id=USER, session_id="s", state={"k": 0})
        renewed = await get(one, GetSessionConfig(num_recent_events=5))
        assert (renewed.state, renewed.events) == ({"k": 0}, [])
        with pytest.raises(StaleSessionError):
            await one.append_event(made, text_event("from before the delete"))
        await two.append_event(await get(two), Event(author="x", actions=delta(**{"app:z": 1})))
        assert (await get(one)).state == {"k": 0, "app:z": 1}
        await one.append_event(await get(one), Event(author="y", actions=delta(**{"app:z": 2})))
        assert (await get(two)).state == {"k": 0, "app:z": 2}

    run(scenario())


def test_a_database_url_opens_one_ledger_in_this_process(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'adk.db'}"
    one, two = LedgerSessionService(url=url), LedgerSessionService(url=url, tenant="t2")

    async def scenario() -> None:
        made = await one.create_session(app_name="a", user_id="u", state={"k": 1})
        got = await LedgerSessionService(url=url).get_session(
            app_name="a", user_id="u", session_id=made.id
        )
        assert got is not None and got.state == {"k": 1}
        # Another tenant of the same database sees none of it
        assert await two.get_session(app_name="a", user_id="u", session_id=made.id) is None

    run(scenario())
    assert one.store.ledger is two.store.ledger  # type: ignore[attr-defined]


def test_closing_the_service_closes_its_connections_not_the_ledger(adk: Target) -> None:
    async def scenario() -> LedgerSessionService:
        async with adk.service() as sessions:
            await sessions.create_session(app_name=adk.app, user_id=USER, session_id="c")
        return sessions

    sessions = run(scenario())
    if adk.remote:
        assert sessions.store.client.http.is_closed  # type: ignore[attr-defined]
    assert adk.ledger.head(adk.key(USER, "c"), tenant=adk.tenant).message_count == 1


def test_an_event_over_the_size_limit_is_refused_whole(adk: Target) -> None:
    """The server in these tests takes messages of 64 KiB at most; in process the same
    limit is set on the ledger."""
    if not adk.remote:
        adk.ledger.limits = dataclasses.replace(adk.ledger.limits, max_message_bytes=64 * 1024)
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="big")
        with pytest.raises(PayloadTooLarge):
            await sessions.append_event(made, text_event("x" * 70_000, actions=delta(k=1)))
        await sessions.append_event(made, text_event("small", actions=delta(k=2)))
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id="big")
        assert got is not None and got.state == {"k": 2}
        assert [e.content.parts[0].text for e in got.events] == ["small"]

    run(scenario())


def test_a_shared_state_change_its_write_would_refuse_is_refused_before_the_event(
    adk: Target,
) -> None:
    """`app:` and `user:` state is written after the session's own message: a change that
    write would refuse is refused first, so nothing is stored, the session is not made
    stale, and the next append goes on from it."""
    sessions = adk.service()

    async def scenario() -> None:
        with pytest.raises(InvalidMessage):
            await sessions.create_session(
                app_name=adk.app, user_id=USER, session_id="c", state={"app:x": float("nan")}
            )
        assert await sessions.get_session(app_name=adk.app, user_id=USER, session_id="c") is None
        made = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="c")
        with pytest.raises(InvalidMessage):
            await sessions.append_event(made, text_event("e1", actions=delta(**{"user:x": 1e999})))
        await sessions.append_event(made, text_event("e2", actions=delta(**{"user:y": 2})))
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id="c")
        assert got is not None and [e.content.parts[0].text for e in got.events] == ["e2"]
        assert got.state == {"user:y": 2}

    run(scenario())


def test_a_shared_state_grown_past_the_size_limit_is_refused_before_the_event(
    adk: Target,
) -> None:
    """In process the ledger's limits are known: a `user:` state that would grow past
    them is refused before the event is stored (over HTTP the server's limits judge it,
    after; docs/agent-sdks.md)."""
    if adk.remote:
        pytest.skip("the server's limits are its own: a client cannot check a size against them")
    adk.ledger.limits = dataclasses.replace(adk.ledger.limits, max_message_bytes=64 * 1024)
    sessions = adk.service()

    async def scenario() -> None:
        made = await sessions.create_session(app_name=adk.app, user_id=USER, session_id="g")
        await sessions.append_event(
            made, text_event("e1", actions=delta(**{"user:a": "x" * 40_000}))
        )
        with pytest.raises(PayloadTooLarge):
            await sessions.append_event(
                made, text_event("e2", actions=delta(**{"user:b": "y" * 40_000}))
            )
        await sessions.append_event(made, text_event("e3", actions=delta(**{"user:c": 3})))
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id="g")
        assert got is not None and [e.content.parts[0].text for e in got.events] == ["e1", "e3"]
        assert set(got.state) == {"user:a", "user:c"}

    run(scenario())
