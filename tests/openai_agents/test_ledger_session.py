"""`LedgerSession` keeps every OpenAI Agents item exactly, and what SQLiteSession deletes
(a popped item, a cleared history) stays in the ledger's events: in process on SQLite and
PostgreSQL and over HTTP on each."""

from __future__ import annotations

import asyncio
import enum
import json
import os
import random
import subprocess
import sys
import threading
import typing
from pathlib import Path
from typing import Any

import pytest
from agents import Session, SessionSettings
from agents.items import TResponseInputItem

from session_ledger.api.client_requests import LedgerAPIError
from session_ledger.api.openai_agents import ITEM_KEY, InvalidItem, LedgerSession, canonical_item
from session_ledger.domain.errors import InvalidInput, InvalidSessionKey
from session_ledger.projections.export import export_session
from session_ledger.projections.export_verify import verify_export
from tests.openai_agents.conftest import Where

ITEMS = 10_000
BATCH = 50  # the test servers' LEDGER_MAX_MESSAGES_PER_WRITE
# Every item type the installed SDK defines (its TResponseInputItem union), by `type`.
SDK_TYPES = {
    str(typing.get_args(typing.get_args(hint)[0])[0] if typing.get_origin(hint) is typing.Union
        else typing.get_args(hint)[0]): cls
    for cls in typing.get_args(TResponseInputItem)
    if (hint := typing.get_type_hints(cls).get("type")) is not None
}  # fmt: skip


def run(coroutine: Any) -> Any:
    return asyncio.run(coroutine)


# -- random items ----------------------------------------------------------------------

TEXTS = ["", "Hello", "Zürich ☀", "東京", "emoji 🧪", 'quote " and \\ slash', "tab\tnew\nline",
         "\x00\x1f\x7f", "</script>", "{\"not\": \"json\"}", " padded "]  # fmt: skip
NUMBERS = [0, -1, 7, 2**53 + 1, -(2**63), 2**70, 0.1, -2.5, 1e-7, 1e300, 3.0, -0.0]


def value(rng: random.Random, depth: int = 0) -> Any:
    kind = rng.randrange(8 if depth < 3 else 5)
    if kind == 0:
        return rng.choice(TEXTS) + str(rng.randrange(1000))
    if kind == 1:
        return rng.choice(NUMBERS)
    if kind == 2:
        return rng.choice([True, False, None])
    if kind in (3, 4):
        return "".join(rng.choice("abc xyz ünï 字 ") for _ in range(rng.randrange(30)))
    if kind in (5, 6):
        return {f"k{rng.randrange(9)}{rng.choice(TEXTS[:4])}": value(rng, depth + 1)
                for _ in range(rng.randrange(4))}  # fmt: skip
    return [value(rng, depth + 1) for _ in range(rng.randrange(4))]


def random_item(rng: random.Random, n: int) -> dict[str, Any]:
    """An item of every SDK type in turn (every field it declares, random JSON values),
    the common ones also in their real shapes, and types no SDK defines yet."""
    kinds = [*SDK_TYPES, "easy", "message", "function_call", "reasoning", "future"]
    kind = kinds[n % len(kinds)]
    if kind == "easy":
        return {"role": rng.choice(["user", "assistant", "system", "developer"]),
                "content": rng.choice(TEXTS) + str(n)}  # fmt: skip
    if kind == "message":
        return {"id": f"msg_{n}", "type": "message", "role": "assistant", "status": "completed",
                "content": [{"type": "output_text", "text": rng.choice(TEXTS), "annotations": [],
                             "logprobs": []}, {"type": "refusal", "refusal": "no"}]}  # fmt: skip
    if kind == "function_call":
        return {"type": "function_call", "call_id": f"call_{n}", "name": "weather",
                "arguments": json.dumps({"city": rng.choice(TEXTS)}), "id": f"fc_{n}"}  # fmt: skip
    if kind == "reasoning":
        return {"type": "reasoning", "id": f"rs_{n}", "encrypted_content": "gAAAA" * 5,
                "summary": [{"type": "summary_text", "text": rng.choice(TEXTS)}]}  # fmt: skip
    if kind == "future":
        return {"type": f"hologram_call_{n % 7}", "payload": value(rng), "n": n}
    item: dict[str, Any] = {"type": kind}
    for field in typing.get_type_hints(SDK_TYPES[kind]):
        if field != "type":
            item[field] = value(rng)
    return item


def test_every_item_type_comes_back_byte_equal(where: Where) -> None:
    """10,000 random items, every type the SDK defines and unknown ones: the same
    canonical JSON back, whole and as the newest N."""
    rng = random.Random(54)
    items = [random_item(rng, n) for n in range(ITEMS)]
    assert {i.get("type") for i in items} >= set(SDK_TYPES)
    session = where.session("round-trip")

    async def write_and_read() -> tuple[list[Any], list[Any]]:
        for start in range(0, ITEMS, BATCH):
            await session.add_items(items[start : start + BATCH])
        return await session.get_items(), await session.get_items(limit=137)

    everything, newest = run(write_and_read())
    expected = [canonical_item(i) for i in items]
    assert [canonical_item(i) for i in everything] == expected
    assert [canonical_item(i) for i in newest] == expected[-137:]


# -- the protocol ------------------------------------------------------------------------


def test_get_items_answers_as_sqlite_session(where: Where) -> None:
    items = [{"role": "user", "content": f"m{i}"} for i in range(5)]
    session = where.session("limits", session_settings={"limit": 3})
    assert isinstance(session, Session)

    async def reads() -> list[list[Any]]:
        assert await session.get_items() == []  # a session never written
        await session.add_items(items)
        return [await session.get_items(limit=n) for n in (None, 2, 5, 9, 0, -1)]

    default, two, five, nine, none, negative = run(reads())
    assert default == items[-3:]  # session_settings.limit
    assert (two, five, nine, none, negative) == (items[-2:], items, items, [], items)
    with pytest.raises(InvalidInput):
        run(session.get_items(limit="2"))  # type: ignore[arg-type]
    for refused in (True, 2.0, 2**63):  # (2**63: over HTTP too, the same typed refusal)
        with pytest.raises(InvalidInput):
            run(session.get_items(limit=refused))
    two_of = enum.IntEnum("Two", {"TWO": 2}).TWO  # an int subclass: an int, as SQLiteSession's
    assert run(session.get_items(limit=two_of)) == items[-2:]


def test_the_newest_items_include_what_others_wrote_since(where: Where) -> None:
    """A session's newest items are read as of now, not as it last wrote or read them."""
    mine, other = where.session("shared"), where.session("shared")
    items = [{"role": "user", "content": f"m{i}"} for i in range(8)]

    async def go() -> list[list[Any]]:
        await mine.add_items(items[:3])
        seen = [await mine.get_items(limit=2)]
        await other.add_items(items[3:5])
        seen.append(await mine.get_items(limit=2))
        await other.pop_item()
        seen.append(await mine.get_items(limit=2))
        await mine.add_items(items[5:6])
        await other.clear_session()
        seen.append(await mine.get_items(limit=2))
        await other.add_items(items[6:])
        seen.append(await mine.get_items(limit=5))
        return seen

    assert run(go()) == [items[1:3], items[3:5], items[2:4], [], items[6:]]


def test_pop_and_clear_are_events_that_keep_the_items(where: Where) -> None:
    """SQLiteSession deletes rows; here the audit trail, the past versions and the
    export still hold the popped item and the cleared history."""
    session = where.session("pop-clear")
    call = {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "42"}

    async def go() -> tuple[Any, Any, Any, Any]:
        await session.add_items([{"role": "user", "content": "hi"}, call, output])
        popped = await session.pop_item()
        after_pop = await session.get_items()
        await session.clear_session()
        return popped, after_pop, await session.get_items(), await session.pop_item()

    popped, after_pop, after_clear, nothing = run(go())
    assert (popped, after_pop, after_clear, nothing) == (
        output,
        [{"role": "user", "content": "hi"}, call],
        [],
        None,
    )
    key, ledger = session.key, where.ledger
    trail = ledger.audit(key)
    assert [e.event_type for e in trail] == [
        "SessionStarted", "MessagesAppended", "MessageRemoved", "HistoryCleared",
    ]  # fmt: skip
    assert trail[2].changes["removed"]["additional_kwargs"][ITEM_KEY] == output
    assert trail[3].changes["cleared"] == 2
    at_append = [m.additional_kwargs.get(ITEM_KEY) for m in ledger.get_all(key, as_of_version=2)]
    assert at_append == [None, call, output]  # the easy message is a plain one
    export = b"".join(export_session(ledger, key))
    assert verify_export(export.split(b"\n")).ok
    events = [json.loads(line) for line in export.splitlines()[1:-1]]
    assert events[2]["payload"]["message"]["additional_kwargs"][ITEM_KEY] == output


def nested(depth: int) -> Any:
    value: Any = 1
    for _ in range(depth):
        value = {"a": value}
    return value


def test_bad_items_are_refused_and_nothing_is_stored(where: Where) -> None:
    session = where.session("bad")
    run(session.add_items([{"role": "user", "content": "kept"}]))
    bad: list[Any] = [
        "not a list",
        ["not an item"],
        [{"role": "user", "content": object()}],
        [{"type": "function_call", "arguments": float("nan")}],
        [{"type": "message", "content": "lone \ud800 surrogate"}],
        [{"type": "x", "data": {1: "a non-string key"}}],
        [{"role": "user", "content": "ok"}, {"type": "x", "v": {1, 2}}],  # all or none
        # nested past the ledger's depth, and past what json.dumps recurses through
        [{"type": "computer_call", "call_id": "c", "action": nested(100)}],
        [{"type": "computer_call", "call_id": "c", "action": nested(5000)}],
        [{"type": "function_call", "name": "f", "arguments": "{}", "x": nested(5000)}],
        [{"role": "user", "content": nested(5000)}],
        [{"type": "unknown_future_item", "v": nested(5000)}],
    ]
    for items in bad:
        with pytest.raises(InvalidItem) as refused:
            run(session.add_items(items))
        assert isinstance(refused.value, TypeError)  # as json.dumps (SQLiteSession) raises
        assert str(refused.value).count("items[") <= 1, refused.value  # named once
    assert run(session.get_items()) == [{"role": "user", "content": "kept"}]
    assert len(where.ledger.audit(session.key)) == 2
    with pytest.raises(InvalidSessionKey):
        where.session("bad\x00key")


def test_too_large_a_write_is_refused_whole(where: Where) -> None:
    session = where.session("too-large")
    huge = [{"role": "user", "content": "x" * (5 * 1024 * 1024)}]  # over every limit here
    with pytest.raises((InvalidInput, LedgerAPIError)):
        run(session.add_items(huge))
    assert run(session.get_items()) == []


def test_the_context_window_is_meaningful_over_a_session(where: Where) -> None:
    """The ledger's windowed `get` over items: each item counts the tokens of its text
    (whitespace tokens here), and a window never opens on a tool output."""
    session = where.session("window")
    call = {"type": "function_call", "call_id": "c", "name": "lookup", "arguments": '{"q":"a b"}'}
    items = [
        {"role": "user", "content": "one two three"},
        call,  # "lookup({"q":"a b"})": 2 tokens
        {"type": "function_call_output", "call_id": "c", "output": "four five"},
        {"type": "message", "role": "assistant",
         "content": [{"type": "output_text", "text": "six seven eight nine"}]},
    ]  # fmt: skip
    run(session.add_items(items))
    assert [m.content for m in where.ledger.get(session.key, token_limit=11)] == [
        "one two three", 'lookup({"q":"a b"})', "four five", "six seven eight nine"
    ]  # fmt: skip
    # 8 tokens would hold the call, its output and the answer, but a window opens on
    # neither a call (an assistant turn) nor an output: it is the answer alone.
    window = where.ledger.get(session.key, token_limit=8)
    assert [m.additional_kwargs[ITEM_KEY] for m in window] == [items[3]]


# -- processes, threads, cancellation --------------------------------------------------

WRITER = """
import asyncio, json, sys
from session_ledger.api.openai_agents import LedgerSession
kwargs, key, name = json.loads(sys.argv[1]), sys.argv[2], sys.argv[3]
session = LedgerSession(key, key=key, **kwargs)
async def main():
    for i in range(40):
        await session.add_items([{"role": "user", "content": f"{name} {i} a"},
                                 {"role": "user", "content": f"{name} {i} b"}])
asyncio.run(main())
"""


def test_concurrent_add_items_from_two_processes_keep_order_and_lose_nothing(
    where: Where,
) -> None:
    key = where.prefix + "two-writers"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    args = [json.dumps(where.process_kwargs), key]
    writers = [
        subprocess.Popen([sys.executable, "-c", WRITER, *args, name], env=env)
        for name in ("A", "B")
    ]
    assert [w.wait(timeout=240) for w in writers] == [0, 0]
    contents = [i["content"] for i in run(LedgerSession(key, key=key, **where.kwargs).get_items())]
    assert len(contents) == 160
    for name in ("A", "B"):
        mine = [c for c in contents if c.startswith(name)]
        assert mine == [f"{name} {i} {part}" for i in range(40) for part in "ab"]
    for first, second in zip(contents[::2], contents[1::2], strict=True):  # batches whole
        assert first.endswith(" a") and second == first[:-1] + "b"


def test_a_cancelled_write_is_stored_before_the_cancellation_is_raised(where: Where) -> None:
    session = where.session("cancelled")
    item = {"role": "user", "content": "once"}

    async def go() -> list[Any]:
        writing = asyncio.create_task(session.add_items([item]))
        await asyncio.sleep(0)  # the write has started
        writing.cancel()
        with pytest.raises(asyncio.CancelledError):
            await writing
        return await session.get_items()

    assert run(go()) == [item]


def test_one_session_serves_several_event_loops_and_threads(where: Where) -> None:
    session = where.session("loops")

    def turn(n: int) -> None:
        asyncio.run(session.add_items([{"role": "user", "content": f"t{n}"}]))

    threads = [threading.Thread(target=turn, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(i["content"] for i in run(session.get_items())) == ["t0", "t1", "t2", "t3"]


def test_a_closed_session_refuses_every_call(tmp_path: Path) -> None:
    from tests.conftest import make_ledger, make_settings

    ledger = make_ledger(make_settings("sqlite", tmp_path))
    session = LedgerSession("closed", ledger=ledger, session_settings=SessionSettings(limit=1))
    session.close()
    for call in (session.get_items(), session.add_items([]), session.pop_item(),
                 session.clear_session()):  # fmt: skip
        with pytest.raises(RuntimeError, match="LedgerSession is closed"):
            run(call)
    with pytest.raises(InvalidInput):
        LedgerSession("nowhere")
    with pytest.raises(InvalidInput):
        LedgerSession("both", ledger=ledger, url="sqlite:///x.db")
    ledger.close()


def test_each_call_is_one_worker_thread_call_and_makes_no_task(tmp_path: Path) -> None:
    """An add or a get hands its work to a thread once and awaits that call's future
    (as SQLiteSession's `asyncio.to_thread`), with no task around it: a task and its
    wait were two more turns of the loop on every write."""
    from concurrent.futures import ThreadPoolExecutor

    from tests.conftest import make_ledger, make_settings

    ledger = make_ledger(make_settings("sqlite", tmp_path))
    session = LedgerSession("hops", ledger=ledger)
    tasks: list[Any] = []
    calls: list[Any] = []

    class Counted(ThreadPoolExecutor):
        def submit(self, fn: Any, /, *args: Any, **kwargs: Any) -> Any:
            calls.append(fn)
            return super().submit(fn, *args, **kwargs)

    def task(loop: asyncio.AbstractEventLoop, coroutine: Any, **kw: Any) -> asyncio.Task[Any]:
        tasks.append(coroutine)
        return asyncio.Task(coroutine, loop=loop, **kw)

    async def go() -> tuple[list[Any], int, int]:
        loop = asyncio.get_running_loop()
        loop.set_default_executor(Counted(1))
        loop.set_task_factory(task)
        await session.add_items([{"role": "user", "content": "one"}])
        found = await session.get_items(limit=1)
        return found, len(tasks), len(calls)

    try:
        assert run(go()) == ([{"role": "user", "content": "one"}], 0, 2)
    finally:
        ledger.close()
