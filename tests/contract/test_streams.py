"""Streams: opened, appended in batches, then completed (one message in the history) or
aborted (the partial in the audit trail only), on every store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.domain.errors import InvalidInput, MessageNotFound, StreamConflict
from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings


def contents(ledger: Ledger, key: str) -> list[str]:
    return [m.content or "" for m in ledger.get_all(key)]


def test_a_completed_stream_is_one_message_of_the_history(ledger: Ledger) -> None:
    ledger.put("k", {"role": "user", "content": "hi"})
    with ledger.stream("k", role="assistant") as s:
        for delta in ["Hel", "lo", ", ", "world"]:
            s.write(delta)
    assert contents(ledger, "k") == ["hi", "Hello, world"]
    assert [m.content for m in ledger.get("k")] == ["hi", "Hello, world"]
    trail = ledger.audit("k")
    kinds = [e.event_type for e in trail]
    assert kinds[:3] == ["SessionStarted", "MessagesAppended", "StreamStarted"]
    assert kinds[-1] == "StreamCompleted"
    deltas = [d for e in trail[3:] for d in e.changes["deltas"]]
    assert "".join(deltas) == "Hello, world"
    state = ledger.stream_state("k", s.stream_id or "")
    assert state is not None and state.state == "completed" and state.text == "Hello, world"


def test_deltas_are_batched_by_bytes(ledger: Ledger) -> None:
    ledger.stream_flush_bytes, ledger.stream_flush_ms = 100, 10**9
    with ledger.stream("k") as s:
        for _ in range(2000):
            s.write("tok ")  # 8,000 bytes: 80 batches, not 2,000 events
    chunks = [e for e in ledger.audit("k", limit=1000) if e.event_type == "StreamChunksAppended"]
    assert len(chunks) == 80  # each 100 bytes; the completion then carries none
    assert contents(ledger, "k") == ["tok " * 2000]


def test_an_exception_aborts_and_keeps_the_partial_out_of_the_window(ledger: Ledger) -> None:
    ledger.stream_flush_bytes = 1
    with pytest.raises(RuntimeError), ledger.stream("k") as s:
        s.write("partial ")
        s.write("answer")
        raise RuntimeError("the model failed")
    assert ledger.get_all("k") == []
    aborted = ledger.audit("k")[-1]
    assert aborted.event_type == "StreamAborted"
    assert aborted.changes["cause"] == "error" and aborted.changes["aborted"] is True
    assert aborted.changes["partial"] == "partial answer"
    assert aborted.changes["added"] == []


def test_an_abort_may_keep_the_partial_as_a_message(ledger: Ledger) -> None:
    opened = ledger.open_stream("k")
    ledger.append_stream("k", opened.stream_id, ["cut ", "off"])
    ledger.abort_stream("k", opened.stream_id, "client_gone", ["!"], keep_partial=True)
    assert contents(ledger, "k") == ["cut off!"]
    assert ledger.audit("k")[-1].changes["partial"] == "cut off!"


def test_a_chunk_after_completion_is_refused_and_nothing_is_stored(ledger: Ledger) -> None:
    opened = ledger.open_stream("k")
    ledger.complete_stream("k", opened.stream_id, ["done"])
    version = ledger.head("k").version
    with pytest.raises(StreamConflict, match="not open"):
        ledger.append_stream("k", opened.stream_id, ["late"])
    with pytest.raises(StreamConflict, match="not open"):
        ledger.complete_stream("k", opened.stream_id)
    with pytest.raises(StreamConflict, match="not open"):
        ledger.abort_stream("k", "never-opened", "error")
    with pytest.raises(StreamConflict, match="exists already"):
        ledger.open_stream("k", stream_id=opened.stream_id)
    assert ledger.head("k").version == version
    assert contents(ledger, "k") == ["done"]


def test_two_concurrent_streams_enter_the_history_in_completion_order(ledger: Ledger) -> None:
    a = ledger.open_stream("k", stream_id="a")
    b = ledger.open_stream("k", stream_id="b")
    ledger.append_stream("k", "a", ["first opened"])
    ledger.append_stream("k", "b", ["second opened"])
    ledger.complete_stream("k", b.stream_id)
    ledger.complete_stream("k", a.stream_id)
    assert contents(ledger, "k") == ["second opened", "first opened"]


def test_bad_stream_input_is_refused(ledger: Ledger) -> None:
    opened = ledger.open_stream("k")
    with pytest.raises(InvalidInput, match="cause"):
        ledger.abort_stream("k", opened.stream_id, "bored")
    with pytest.raises(InvalidInput, match="delta"):
        ledger.append_stream("k", opened.stream_id, [])
    with pytest.raises(InvalidInput, match="U\\+0000"):
        ledger.append_stream("k", opened.stream_id, ["a\x00b"])
    with pytest.raises(InvalidInput):
        ledger.open_stream("k", role="narrator")
    for name in ("turn", "parent"):
        with pytest.raises(InvalidInput, match=f"{name} must not contain NUL"):
            ledger.open_stream("k", **{name: "a\x00"})
        with pytest.raises(InvalidInput, match=f"{name} contains a lone surrogate"):
            ledger.open_stream("k", **{name: "\ud800"})


def test_idle_streams_are_aborted_as_timed_out(ledger: Ledger) -> None:
    opened = ledger.open_stream("k")
    ledger.append_stream("k", opened.stream_id, ["half"])
    ledger.abort_idle_streams(3600)
    assert ledger.audit("k")[-1].event_type == "StreamChunksAppended"
    # (the PostgreSQL store is shared by the run's tests: other tests' streams count too)
    assert ledger.abort_idle_streams(0) >= 1
    last = ledger.audit("k")[-1]
    assert last.event_type == "StreamAborted" and last.changes["cause"] == "timeout"
    assert last.changes["partial"] == "half" and last.actor == "ledger"
    ledger.abort_idle_streams(0)
    assert ledger.audit("k")[-1].version == last.version


def test_async_with_records_a_cancelled_stream_as_client_gone(ledger: Ledger) -> None:
    async def produce(delivered: asyncio.Event) -> None:
        async with ledger.stream("k") as s:
            await s.awrite("seen ")
            delivered.set()
            await asyncio.sleep(30)

    async def main() -> None:
        delivered = asyncio.Event()
        task = asyncio.create_task(produce(delivered))
        await delivered.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    last = ledger.audit("k")[-1]
    assert last.changes["cause"] == "client_gone" and last.changes["partial"] == "seen "


def test_open_streams_survive_snapshots(store: str, tmp_path: Path) -> None:
    if store == "memory":
        pytest.skip("a second Ledger on memory:// opens another store")
    settings = make_settings(store, tmp_path, snapshot_interval=2)  # a snapshot every 2
    first = make_ledger(settings)
    for stream_id in ("s0", "s1", "s2"):
        first.open_stream("k", stream_id=stream_id)
    for n in range(4):
        first.append_stream("k", "s1", [f"{n}"])
    first.complete_stream("k", "s0", ["zero"])
    second = open_ledger(settings)  # loads the session from its latest snapshot
    try:
        second.append_stream("k", "s2", ["x"])
        second.complete_stream("k", "s2")
        with pytest.raises(StreamConflict):
            second.append_stream("k", "s0", ["late"])
        second.complete_stream("k", "s1")
        assert contents(second, "k") == ["zero", "x", "0123"]
    finally:
        first.close()
        second.close()


def test_a_process_whose_copy_is_behind_takes_what_another_wrote(
    store: str, tmp_path: Path
) -> None:
    """A second ledger on the store (another process) whose cached copy of the session is
    behind: a stream the other opened, a message the other appended, a hold the other
    released are taken as the store holds them, not refused for what the copy holds."""
    if store == "memory":
        pytest.skip("a second Ledger on memory:// opens another store")
    settings = make_settings(store, tmp_path)
    first, second = make_ledger(settings), open_ledger(settings)
    try:
        second.put("k", {"role": "user", "content": "hi"})  # (second caches the session)
        first.open_stream("k", stream_id="s1")
        second.complete_stream("k", "s1", ["answer"])
        first.put("k", {"role": "user", "content": "last"})
        done = second.delete_message("k", -3)  # (of 3 messages; its copy holds 2)
        assert [m.content for m in done.removed] == ["hi"]
        first.place_hold("k", reference="case-1", reason="review")
        second.release_hold("k", reference="case-1", reason="done")  # (its copy holds none)
        first.put("k", {"role": "user", "content": "more"})
        second.delete_last_message("k")
        assert contents(second, "k") == ["answer", "last"]
        with pytest.raises(MessageNotFound):  # (refused of the state read fresh)
            second.delete_message("k", -3)
    finally:
        first.close()
        second.close()
