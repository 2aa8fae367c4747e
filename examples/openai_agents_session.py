"""An OpenAI Agents SDK agent whose session lives in the session ledger (LedgerSession).

    .venv/bin/python examples/openai_agents_session.py [DATABASE_URL]

DATABASE_URL defaults to a new SQLite file in a temporary folder; `postgresql://...`
works the same, and `url="http://..."` with an API key puts the session on a server. The
model is a scripted `Model` (nothing goes over the network): asked "weather <city>" it
calls the `weather` tool and answers with its result, and asked anything else it
answers from the conversation the Runner gave it, which the ledger kept. Three turns
through the SDK's `Runner`, then a correction (`pop_item` twice, as SQLiteSession users
do), the items, the ledger's audit trail, and the popped turn replayed from before it.
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
from pathlib import Path
from typing import Any

from agents import Agent, Model, ModelResponse, RunConfig, Runner, Usage, function_tool
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
)

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.openai_agents import LedgerSession, from_message
from session_ledger.api.settings import Settings

SESSION = "user-42/chat-1"
QUESTIONS = ["weather Zürich", "weather Oslo", "Which cities did I ask about?"]


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return {"Zürich": "sunny, 21 °C", "Oslo": "rain, 9 °C"}.get(city, "unknown")


class ScriptedModel(Model):
    """Plays a script instead of calling a model."""

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        last = items[-1]
        if last.get("type") == "function_call_output":
            return reply(say(f"It is {last['output']}."))
        asked = str(last.get("content", ""))
        if asked.startswith("weather "):
            city = asked.removeprefix("weather ")
            return reply(ResponseFunctionToolCall(
                type="function_call", call_id=f"call_{len(items)}", name="weather",
                arguments=json.dumps({"city": city}, ensure_ascii=False),
            ))  # fmt: skip
        cities = [
            str(i["content"]).removeprefix("weather ")
            for i in items
            if i.get("role") == "user" and str(i.get("content", "")).startswith("weather ")
        ]
        return reply(say(f"You asked about {' and '.join(cities)}."))

    def stream_response(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError("this model answers whole responses only")


def say(text: str) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id="msg", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )  # fmt: skip


def reply(*output: Any) -> ModelResponse:
    return ModelResponse(output=list(output), usage=Usage(), response_id=None)


def describe(item: dict[str, Any]) -> str:
    """One line for an item: its kind and its words."""
    kind = item.get("type", "message")
    if kind == "function_call":
        return f"function_call   {item['name']}({item['arguments']})"
    if kind == "function_call_output":
        return f"function_output {item['output']}"
    content = item["content"]
    text = content if isinstance(content, str) else " ".join(p["text"] for p in content)
    return f"{item['role']:<15} {text}"


async def converse(session: LedgerSession) -> None:
    agent = Agent(name="forecaster", model=ScriptedModel(), tools=[weather])
    for question in QUESTIONS:
        # (tracing off: traces go to OpenAI's servers, and this runs offline)
        run_config = RunConfig(tracing_disabled=True)
        result = await Runner.run(agent, question, session=session, run_config=run_config)
        print(f"> {question}\n{result.final_output}")
    # A correction: take the last turn back (its answer, then its question).
    undone = [await session.pop_item(), await session.pop_item()]
    print(f"\nPopped {len(undone)} items; the session holds:")
    for i, item in enumerate(await session.get_items()):
        print(f"  [{i}] {describe(item)}")


def main(url: str) -> None:
    ledger = open_ledger(Settings(database_url=url))
    try:
        session = LedgerSession(SESSION, ledger=ledger, actor="agent")
        asyncio.run(converse(session))
        trail = ledger.audit(SESSION)
        print("\nAudit trail:")
        for e in trail:
            added = len(e.changes.get("added", []))
            print(f"  v{e.version} {e.event_type:<16} by {e.actor}", end="")
            print(f", {added} added" if added else "")
        before = next(e.version for e in trail if e.event_type == "MessageRemoved") - 1
        print(f"\nThe session at v{before}, before the correction (nothing was deleted):")
        for m in ledger.get_all(SESSION, as_of_version=before)[-2:]:
            print(f"  {describe(from_message(m.to_dict()))}")
    finally:
        ledger.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(folder) / 'ledger.db'}")
