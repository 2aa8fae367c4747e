"""A Google ADK agent whose sessions live in the session ledger (LedgerSessionService).

    .venv/bin/python examples/adk_agent.py [DATABASE_URL]

DATABASE_URL defaults to a new SQLite file in a temporary folder; `postgresql://...`
works the same. The model is a scripted `BaseLlm` (nothing goes over the network):
asked "weather <city>" it calls the `weather` tool and answers with its result, and
asked anything else it answers from the conversation ADK gave it, which the ledger
kept. Three turns through ADK's `Runner`, then the session as ADK reads it back, the
ledger's audit trail, a `delete_session`, and the conversation replayed from before it.
"""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.adk.tools.tool_context import ToolContext
from google.genai import types

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.google_adk import LedgerSessionService
from session_ledger.api.settings import Settings

APP, USER, SESSION = "weather-app", "user-42", "chat-1"
QUESTIONS = ["weather Zürich", "weather Oslo", "Which cities did I ask about?"]


def weather(city: str, tool_context: ToolContext) -> str:
    """The weather in a city."""
    asked = tool_context.state.get("user:cities", [])
    tool_context.state["user:cities"] = [*asked, city]  # user-scoped: every session sees it
    tool_context.state["temp:last_city"] = city  # temp: never stored
    return {"Zürich": "sunny, 21 °C", "Oslo": "rain, 9 °C"}.get(city, "unknown")


class ScriptedModel(BaseLlm):
    """Plays a script instead of calling a model."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1].parts[0]
        if last.function_response is not None:  # the tool answered: say it
            said = last.function_response.response["result"]
            yield _answer(types.Part(text=f"It is {said}."))
        elif last.text.startswith("weather "):
            city = last.text.removeprefix("weather ")
            call = types.FunctionCall(id=f"call-{city}", name="weather", args={"city": city})
            yield _answer(types.Part(text=f"Looking up {city}."), types.Part(function_call=call))
        else:  # answer from the conversation the runner gave it (read from the ledger)
            cities = [
                p.function_call.args["city"]
                for c in llm_request.contents
                for p in c.parts or []
                if p.function_call
            ]
            yield _answer(types.Part(text=f"You asked about {' and '.join(cities)}."))


def _answer(*parts: types.Part) -> LlmResponse:
    words = sum(len((p.text or "").split()) for p in parts)
    usage = types.GenerateContentResponseUsageMetadata(
        prompt_token_count=0, candidates_token_count=words, total_token_count=words
    )
    return LlmResponse(content=types.Content(role="model", parts=list(parts)), usage_metadata=usage)


def show_part(part: types.Part) -> str:
    if part.function_call:
        return f"calls {part.function_call.name}({part.function_call.args['city']})"
    if part.function_response:
        return f"{part.function_response.name} -> {part.function_response.response['result']}"
    return part.text or ""


async def main(url: str) -> None:
    ledger = open_ledger(Settings(database_url=url))
    sessions = LedgerSessionService(ledger=ledger, actor="weather-bot")
    agent = LlmAgent(name="forecaster", model=ScriptedModel(), tools=[weather])
    runner = Runner(app_name=APP, agent=agent, session_service=sessions)
    await sessions.create_session(app_name=APP, user_id=USER, session_id=SESSION)
    for question in QUESTIONS:
        print(f"> {question}")
        message = types.Content(role="user", parts=[types.Part(text=question)])
        async for event in runner.run_async(user_id=USER, session_id=SESSION, new_message=message):
            if event.is_final_response():
                print(event.content.parts[0].text)

    session = await sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    assert session is not None
    print(f"\nThe session as ADK reads it back: {len(session.events)} events")
    for event in session.events:
        print(f"  {event.author:<10} " + " | ".join(show_part(p) for p in event.content.parts))
    print(f"state: {session.state}")

    key = f"adk/{APP}/{USER}/{SESSION}"
    print(f"\nThe ledger's audit trail of {key}:")
    for entry in ledger.audit(key):
        print(f"  v{entry.version} {entry.event_type:<16} by {entry.actor}")
    before = ledger.head(key).version

    await sessions.delete_session(app_name=APP, user_id=USER, session_id=SESSION)
    gone = await sessions.get_session(app_name=APP, user_id=USER, session_id=SESSION)
    print(f"\nAfter delete_session ADK finds {gone}; the audit trail ends with")
    print(f"  {ledger.audit(key, after_version=before)[0].event_type}")
    kept = ledger.get_all(key, as_of_version=before)
    print(f"and the ledger replays version {before}: {len(kept)} messages (1 + the events)")
    report = ledger.verify(key)
    intact = "intact" if report.first_bad_version is None else f"broken: {report.problem}"
    print(f"hash chain of {report.versions} events: {intact}")
    ledger.close()


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        default = f"sqlite:///{Path(tmp) / 'ledger.db'}"
        asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else default))
