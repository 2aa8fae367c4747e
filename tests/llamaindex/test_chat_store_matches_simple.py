"""LedgerChatStore answers every BaseChatStore call as LlamaIndex's SimpleChatStore does.

The same scenarios run against both stores, call by call, sync and async: the results
(messages, None, the exception type) must be equal. Both list keys in the order they
were made; a key cleared and written again keeps its place in ours (SimpleChatStore
moves it last), so the scenarios that clear keys compare key lists sorted.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ChatMessage, ImageBlock, TextBlock, ToolCallBlock
from llama_index.core.storage.chat_store import SimpleChatStore

from session_ledger.api.llamaindex import LedgerChatStore
from tests.llamaindex.conftest import Where

MESSAGES = [
    ChatMessage(role="system", content="Be brief."),
    ChatMessage(role="user", content="What is the weather in Zürich? ☀"),
    ChatMessage(
        role="assistant",
        blocks=[ToolCallBlock(tool_call_id="c1", tool_name="weather",
                              tool_kwargs={"city": "Zürich"})],
    ),
    ChatMessage(role="tool", content="12°C, rain", additional_kwargs={"tool_call_id": "c1"}),
    ChatMessage(role="assistant", content="12°C and rain.", additional_kwargs={"score": 0.5}),
    ChatMessage(role="user", blocks=[TextBlock(text="and this?"),
                                     ImageBlock(url="https://example.com/a.png")]),
    ChatMessage(role="assistant", content=""),
]  # fmt: skip


def outcome(call: Callable[[], Any]) -> Any:
    """What a call gave, comparable across stores: dumps of messages, or the error type."""
    try:
        result = call()
    except IndexError:
        return "IndexError"
    return dump(result)


def dump(value: Any) -> Any:
    if isinstance(value, ChatMessage):
        return value.model_dump(mode="json")
    if isinstance(value, list):
        return [dump(v) for v in value]
    return value


def sync_calls(store: Any, k: Callable[[str], str]) -> list[tuple[str, Callable[[], Any]]]:
    """A scenario touching every method and edge case; `k` names the keys."""
    m = MESSAGES
    return [
        ("get unknown", lambda: store.get_messages(k("a"))),
        ("delete_messages unknown", lambda: store.delete_messages(k("a"))),
        ("delete_message unknown", lambda: store.delete_message(k("a"), 0)),
        ("delete_last unknown", lambda: store.delete_last_message(k("a"))),
        ("keys empty", lambda: sorted(store.get_keys())),
        ("set", lambda: store.set_messages(k("a"), m[:4])),
        ("get", lambda: store.get_messages(k("a"))),
        ("add", lambda: store.add_message(k("a"), m[4])),
        ("add at 0", lambda: store.add_message(k("a"), m[5], idx=0)),
        ("add at -1", lambda: store.add_message(k("a"), m[6], idx=-1)),
        ("add past end", lambda: store.add_message(k("a"), m[0], idx=99)),
        ("add at -99", lambda: store.add_message(k("a"), m[1], idx=-99)),
        ("get after adds", lambda: store.get_messages(k("a"))),
        ("delete 2", lambda: store.delete_message(k("a"), 2)),
        ("delete past end", lambda: store.delete_message(k("a"), 8)),
        ("delete far past end", lambda: store.delete_message(k("a"), 10**6)),
        ("delete -1", lambda: store.delete_message(k("a"), -1)),
        ("delete before start", lambda: store.delete_message(k("a"), -99)),
        ("delete last", lambda: store.delete_last_message(k("a"))),
        ("get after deletes", lambda: store.get_messages(k("a"))),
        ("add new key", lambda: store.add_message(k("b/ü x"), m[1])),
        ("set other key", lambda: store.set_messages(k("c"), m)),
        ("keys", lambda: sorted(store.get_keys())),
        ("delete_messages", lambda: store.delete_messages(k("a"))),
        ("get cleared", lambda: store.get_messages(k("a"))),
        ("keys after clear", lambda: sorted(store.get_keys())),
        ("delete_messages again", lambda: store.delete_messages(k("a"))),
        ("delete_last cleared", lambda: store.delete_last_message(k("a"))),
        ("delete_message cleared", lambda: store.delete_message(k("a"), 0)),
        ("set shorter", lambda: store.set_messages(k("c"), m[1:3])),
        ("get shorter", lambda: store.get_messages(k("c"))),
        ("add to cleared", lambda: store.add_message(k("a"), m[2])),
        ("keys at end", lambda: sorted(store.get_keys())),
    ]


def async_calls(store: Any, k: Callable[[str], str]) -> list[tuple[str, Callable[[], Any]]]:
    """The same scenario through the async twins."""
    m, run = MESSAGES, asyncio.run
    return [
        ("get unknown", lambda: run(store.aget_messages(k("a")))),
        ("delete_messages unknown", lambda: run(store.adelete_messages(k("a")))),
        ("delete_message unknown", lambda: run(store.adelete_message(k("a"), 0))),
        ("delete_last unknown", lambda: run(store.adelete_last_message(k("a")))),
        ("set", lambda: run(store.aset_messages(k("a"), m[:4]))),
        ("add", lambda: run(store.async_add_message(k("a"), m[4]))),
        ("get", lambda: run(store.aget_messages(k("a")))),
        ("delete 1", lambda: run(store.adelete_message(k("a"), 1))),
        ("delete past end", lambda: run(store.adelete_message(k("a"), 4))),
        ("delete before start", lambda: run(store.adelete_message(k("a"), -5))),
        ("delete last", lambda: run(store.adelete_last_message(k("a")))),
        ("keys", lambda: sorted(run(store.aget_keys()))),
        ("delete_messages", lambda: run(store.adelete_messages(k("a")))),
        ("delete_messages again", lambda: run(store.adelete_messages(k("a")))),
        ("keys after clear", lambda: sorted(run(store.aget_keys()))),
    ]


def keys_of(where: Where) -> Callable[[str], str]:
    return lambda name: where.prefix + name


def mine(where: Where, result: Any) -> Any:
    """Key lists narrowed to this test's keys (a server's tenant holds other tests' too)."""
    if isinstance(result, list) and all(isinstance(r, str) for r in result):
        return [r for r in result if r.startswith(where.prefix)]
    return result


@pytest.mark.parametrize("scenario", [sync_calls, async_calls], ids=["sync", "async"])
def test_every_method_answers_as_simple_chat_store(where: Where, scenario: Any) -> None:
    simple, ours = SimpleChatStore(), LedgerChatStore(**where.kwargs)
    k = keys_of(where)
    for (name, theirs), (_, call) in zip(scenario(simple, k), scenario(ours, k), strict=True):
        expected = outcome(theirs)
        assert mine(where, outcome(call)) == expected, name


KEY, MESSAGE = st.sampled_from("ab"), st.sampled_from(MESSAGES)
OPS = st.lists(
    st.one_of(
        st.tuples(st.just("set"), KEY, st.lists(MESSAGE, min_size=1, max_size=4)),
        st.tuples(st.just("add"), KEY, MESSAGE, st.none() | st.integers(-6, 6)),
        st.tuples(st.just("delete_message"), st.sampled_from("ab"), st.integers(-7, 7)),
        st.tuples(st.just("delete_last"), st.sampled_from("ab")),
        st.tuples(st.just("delete_messages"), st.sampled_from("ab")),
        st.tuples(st.just("get"), st.sampled_from("ab")),
        st.tuples(st.just("keys")),
    ),
    max_size=12,
)  # fmt: skip


EXAMPLES = itertools.count()


def apply(store: Any, op: tuple[Any, ...], k: Callable[[str], str]) -> Any:
    name, *args = op
    if name == "keys":
        return outcome(lambda: sorted(store.get_keys()))
    key = k(args[0])
    return outcome({
        "set": lambda: store.set_messages(key, list(args[1])),
        "add": lambda: store.add_message(key, args[1], idx=args[2]),
        "delete_message": lambda: store.delete_message(key, args[1]),
        "delete_last": lambda: store.delete_last_message(key),
        "delete_messages": lambda: store.delete_messages(key),
        "get": lambda: store.get_messages(key),
    }[name])  # fmt: skip


def empties_a_key(simple: SimpleChatStore, op: tuple[Any, ...], k: Callable[[str], str]) -> bool:
    """Would `op` leave a key with an empty list (the documented difference)?"""
    if op[0] not in ("delete_message", "delete_last"):
        return False
    held = simple.store.get(k(op[1]))
    return held is not None and len(held) == 1 and (op[0] == "delete_last" or op[2] in (0, -1))


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=OPS)
def test_random_call_sequences_answer_as_simple_chat_store(
    where: Where, ops: list[tuple[Any, ...]]
) -> None:
    simple, ours = SimpleChatStore(), LedgerChatStore(**where.kwargs)
    prefix = f"{where.prefix}{next(EXAMPLES)}/"  # each example its own keys
    k = lambda name: prefix + name  # noqa: E731
    for op in ops:
        if empties_a_key(simple, op, k):
            continue
        expected = apply(simple, op, k)
        got = apply(ours, op, k)
        if op[0] == "keys":
            got = [key for key in got if key.startswith(prefix)]
        assert got == expected, op


WRITES = st.lists(
    st.one_of(
        st.tuples(st.just("set"), st.sampled_from("dbca"), st.lists(MESSAGE, max_size=2)),
        st.tuples(st.just("add"), st.sampled_from("dbca"), MESSAGE, st.none() | st.integers(-2, 2)),
        st.tuples(st.just("delete_message"), st.sampled_from("dbca"), st.integers(-2, 2)),
        st.tuples(st.just("delete_last"), st.sampled_from("dbca")),
        st.tuples(st.just("keys")),
    ),
    max_size=10,
)  # fmt: skip


@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(ops=WRITES)
def test_get_keys_lists_keys_in_the_order_simple_chat_store_made_them(
    where: Where, ops: list[tuple[Any, ...]]
) -> None:
    simple, ours = SimpleChatStore(), LedgerChatStore(**where.kwargs)
    prefix = f"{where.prefix}{next(EXAMPLES)}/"
    k = lambda name: prefix + name  # noqa: E731
    for op in [*ops, ("keys",)]:
        if empties_a_key(simple, op, k):
            continue
        if op[0] == "keys":
            expected = simple.get_keys()
            assert [key for key in ours.get_keys() if key.startswith(prefix)] == expected
            assert [key for key in asyncio.run(ours.aget_keys()) if key.startswith(prefix)] == (
                expected
            )
        else:
            assert apply(ours, op, k) == apply(simple, op, k), op


def test_a_key_cleared_and_written_again_keeps_its_place(local_ledger: Any) -> None:
    """The documented difference: SimpleChatStore deletes a cleared key, and a write
    makes it anew, last; the ledger's session stays the one made first."""
    simple, ours = SimpleChatStore(), LedgerChatStore(ledger=local_ledger)
    for store in (simple, ours):
        for key in ("b", "a"):
            store.add_message(key, MESSAGES[1])
        store.delete_messages("b")
        assert store.get_keys() == ["a"]
        store.add_message("b", MESSAGES[1])
    assert (simple.get_keys(), ours.get_keys()) == (["a", "b"], ["b", "a"])


@pytest.mark.parametrize("empty", ["set []", "delete each"])
def test_an_emptied_key_stays_a_key_as_in_simple_chat_store(local_ledger: Any, empty: str) -> None:
    simple, ours = SimpleChatStore(), LedgerChatStore(ledger=local_ledger)
    for store in (simple, ours):
        store.set_messages("k", MESSAGES[:1])
        if empty == "set []":
            store.set_messages("k", [])
        else:
            store.delete_last_message("k")
    assert [outcome(lambda s=s: s.get_keys()) for s in (simple, ours)] == [["k"], ["k"]]
