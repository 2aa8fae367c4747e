"""A real llama-index-core FunctionAgent keeps its memory in the ledger.

The LLM is llama-index-core's own MockFunctionCallingLLM with a scripted response
generator (no network): asked a question it calls a tool, shown the tool's answer it
replies. Several turns run on `LedgerMemory` and on `Memory` + `LedgerDBChatStore`; the
stored transcript and the audit trail are checked turn by turn.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest
from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.memory import BaseMemory, Memory
from llama_index.core.storage.chat_store.base_db import MessageStatus
from llama_index.core.tools import FunctionTool

from session_ledger.api.llamaindex import LedgerDBChatStore, LedgerMemory
from tests.llamaindex.conftest import Where

# llama-index's workflows find an agent's steps with inspect.getmembers on the agent, a
# pydantic model, whose deprecated attributes warn on every read (1,728 warnings a run).
pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"
)

QUESTIONS = [("weather", "Zürich"), ("add", "2 3"), ("weather", "東京")]


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def add(a: int, b: int) -> int:
    """Add two numbers."""
    return a + b


def scripted(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """Asked "<tool> <args>", call that tool; shown a tool's output, answer with it."""
    last = messages[-1]
    if last.role == "tool":
        return ChatMessage(role="assistant", content=f"Answer: {last.content}")
    tool, _, args = (last.content or "").partition(" ")
    numbers = dict(zip("ab", map(int, args.split()), strict=True)) if tool == "add" else {}
    arguments = {"city": args} if tool == "weather" else numbers
    call_id = f"call-{len(messages)}"
    return ChatMessage(
        role="assistant",
        blocks=[
            TextBlock(text=f"Calling {tool}."),
            ToolCallBlock(tool_call_id=call_id, tool_name=tool, tool_kwargs=arguments),
        ],
    )


def agent() -> FunctionAgent:
    llm = MockFunctionCallingLLM(response_generator=scripted)
    return FunctionAgent(tools=[FunctionTool.from_defaults(weather),
                                FunctionTool.from_defaults(add)], llm=llm)  # fmt: skip


async def converse(memory: BaseMemory) -> list[str]:
    answers = []
    for tool, args in QUESTIONS:
        answer = await agent().run(user_msg=f"{tool} {args}", memory=memory)
        answers.append(str(answer))
    return answers


def check_transcript(stored: list[ChatMessage]) -> None:
    """user, assistant (tool call), tool, assistant (answer), in order, for every turn."""
    assert [m.role.value for m in stored] == ["user", "assistant", "tool", "assistant"] * 3
    for turn, (tool, args) in enumerate(QUESTIONS):
        user, call, output, answer = stored[4 * turn : 4 * turn + 4]
        assert user.content == f"{tool} {args}"
        (block,) = [b for b in call.blocks if isinstance(b, ToolCallBlock)]
        assert block.tool_name == tool
        assert output.additional_kwargs["tool_call_id"] == block.tool_call_id
        expected = weather(args) if tool == "weather" else str(add(*map(int, args.split())))
        assert output.content == expected
        assert answer.content == f"Answer: {expected}"


def check_audit(where: Where, key: str) -> None:
    """Every write is an event: per turn the user's message, then the agent's scratchpad
    (tool call, tool output, answer) in one write."""
    trail = where.ledger.audit(key)
    turns = len(QUESTIONS)
    assert [e.event_type for e in trail] == ["SessionStarted"] + ["MessagesAppended"] * 2 * turns
    assert [len(e.changes["added"]) for e in trail[1:]] == [1, 3] * turns
    roles = [m["role"] for e in trail[1:] for m in e.changes["added"]]
    assert roles == ["user", "assistant", "tool", "assistant"] * turns
    assert all(e.actor for e in trail)


def test_function_agent_on_ledger_memory(where: Where) -> None:
    key = where.prefix + "agent"
    memory = LedgerMemory.from_defaults(chat_store_key=key, **where.kwargs)
    answers = asyncio.run(converse(memory))
    assert answers == ["Answer: sunny in Zürich", "Answer: 5", "Answer: sunny in 東京"]
    check_transcript(memory.get_all())
    check_audit(where, key)


def test_function_agent_on_memory_with_ledger_db_chat_store(where: Where) -> None:
    key = where.prefix + "agent"
    memory = Memory.from_defaults(session_id=key, chat_store=LedgerDBChatStore(**where.kwargs))
    answers = asyncio.run(converse(memory))
    assert answers[1] == "Answer: 5"
    check_transcript(memory.get_all())
    check_audit(where, key)


def test_memory_archives_its_flushed_messages_as_an_event(where: Where) -> None:
    """Over its token limit, Memory archives the oldest turn: one MessagesArchived event,
    and the archive stays readable, in-process and over HTTP."""
    key = where.prefix + "archive"
    store = LedgerDBChatStore(**where.kwargs)
    memory = Memory.from_defaults(
        session_id=key, chat_store=store, token_limit=40, token_flush_size=10,
        tokenizer_fn=str.split, chat_history_token_ratio=0.5,
    )  # fmt: skip
    asyncio.run(converse(memory))
    archived = memory.get_all(status=MessageStatus.ARCHIVED)
    active = memory.get_all(status=MessageStatus.ACTIVE)
    assert archived and active[0].role.value == "user"
    check_transcript(archived + active)
    trail = where.ledger.audit(key)
    assert "MessagesArchived" in [e.event_type for e in trail]
    assert sum(e.changes.get("archived", 0) for e in trail) == len(archived)
