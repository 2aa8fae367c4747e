"""A LlamaIndex FunctionAgent whose memory is a session-ledger session, in this process.

    .venv/bin/python examples/agent_in_process.py [DATABASE_URL]

DATABASE_URL defaults to a new SQLite file in a temporary folder (its tables are made on
first use); `postgresql://...` works the same. The LLM is LlamaIndex's
MockFunctionCallingLLM playing a script, so nothing goes over the network: asked
"weather <city>" it calls the `weather` tool, shown the tool's output it answers with
it, and asked anything else it answers from the conversation it was given, which the
ledger kept. Three turns, then the stored transcript and the audit trail.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from llama_index.core.agent.workflow import FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.llms import MockFunctionCallingLLM
from llama_index.core.memory import BaseMemory
from llama_index.core.tools import FunctionTool

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.llamaindex import LedgerMemory
from session_ledger.api.settings import Settings

SESSION = "user-42/chat-1"
QUESTIONS = ["weather Zürich", "weather Oslo", "Which cities did I ask about?"]


def weather(city: str) -> str:
    """The weather in a city."""
    return {"Zürich": "sunny, 21 °C", "Oslo": "rain, 9 °C"}.get(city, "unknown")


def scripted(messages: Sequence[ChatMessage], **kwargs: Any) -> ChatMessage:
    """The model's part: call the tool, relay its answer, or recall the conversation."""
    last = messages[-1]
    if last.role == "tool":
        return ChatMessage(role="assistant", content=f"It is {last.content}.")
    asked = last.content or ""
    if asked.startswith("weather "):
        city = asked.removeprefix("weather ")
        call = ToolCallBlock(
            tool_call_id=f"call-{len(messages)}", tool_name="weather", tool_kwargs={"city": city}
        )
        return ChatMessage(role="assistant", blocks=[TextBlock(text=f"Looking up {city}."), call])
    cities = [
        (m.content or "").removeprefix("weather ")
        for m in messages
        if m.role == "user" and (m.content or "").startswith("weather ")
    ]
    return ChatMessage(role="assistant", content=f"You asked about {' and '.join(cities)}.")


def make_agent() -> FunctionAgent:
    llm = MockFunctionCallingLLM(response_generator=scripted)
    return FunctionAgent(tools=[FunctionTool.from_defaults(weather)], llm=llm)


async def converse(memory: BaseMemory) -> None:
    """Three turns; a new agent each turn, as a stateless web handler would make."""
    for question in QUESTIONS:
        answer = await make_agent().run(user_msg=question, memory=memory)
        print(f"> {question}\n{answer}")


def print_transcript(messages: Sequence[Any]) -> None:
    print("\nTranscript:")
    for i, m in enumerate(messages):
        tools = [b.tool_name for b in m.blocks if isinstance(b, ToolCallBlock)]
        print(f"  [{i}] {m.role.value:<9} {m.content}" + (f"  (calls {tools[0]})" if tools else ""))


def print_audit(entries: Sequence[Any]) -> None:
    """The audit trail: `Ledger.audit(key)`, or `LedgerClient.events(key).events`."""
    print("\nAudit trail:")
    for e in entries:
        added = len(e.changes.get("added", []))
        print(f"  v{e.version} {e.event_type:<16} by {e.actor}", end="")
        print(f", {added} added" if added else "")


def main(url: str) -> None:
    ledger = open_ledger(Settings(database_url=url))
    try:
        memory = LedgerMemory.from_defaults(chat_store_key=SESSION, ledger=ledger, actor="agent")
        asyncio.run(converse(memory))
        print_transcript(memory.get_all())
        print_audit(ledger.audit(SESSION))
    finally:
        ledger.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(folder) / 'ledger.db'}")
