"""An agent run through ADK's own `Runner` with a scripted model (no network) on
LedgerSessionService: afterwards the audit trail, replay at a version and the
compliance export (checked by `verify-export`) show every event, the deleted ones too."""

from __future__ import annotations

import asyncio
import json
import os
from collections.abc import AsyncGenerator
from pathlib import Path

from google.adk.agents import LlmAgent
from google.adk.models.base_llm import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import Runner
from google.genai import types

from tests.e2e.conftest import run_cli
from tests.google_adk.conftest import Target

USER, SESSION = "u-1", "run-1"


def lookup(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


class Scripted(BaseLlm):
    """Calls `lookup` for "weather <city>", then says what it returned."""

    model: str = "scripted"

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        last = llm_request.contents[-1].parts[0]
        if last.function_response is not None:
            part = types.Part(text=f"Result: {last.function_response.response['result']}")
        else:
            call = types.FunctionCall(id="c-1", name="lookup", args={"city": last.text.split()[1]})
            part = types.Part(function_call=call)
        usage = types.GenerateContentResponseUsageMetadata(total_token_count=1)
        yield LlmResponse(content=types.Content(role="model", parts=[part]), usage_metadata=usage)


def test_a_runner_on_the_ledger_leaves_every_event_in_audit_replay_and_export(
    adk: Target, tmp_path: Path
) -> None:
    sessions = adk.service()
    agent = LlmAgent(name="bot", model=Scripted(), tools=[lookup])
    runner = Runner(app_name=adk.app, agent=agent, session_service=sessions)
    answers: list[str] = []

    async def converse() -> None:
        await sessions.create_session(app_name=adk.app, user_id=USER, session_id=SESSION)
        for city in ("Oslo", "Lima"):
            message = types.Content(role="user", parts=[types.Part(text=f"weather {city}")])
            async for event in runner.run_async(
                user_id=USER, session_id=SESSION, new_message=message
            ):
                if event.is_final_response():
                    answers.append(event.content.parts[0].text)
        got = await sessions.get_session(app_name=adk.app, user_id=USER, session_id=SESSION)
        assert got is not None and len(got.events) == 8  # (user, call, result, answer) x 2
        await sessions.delete_session(app_name=adk.app, user_id=USER, session_id=SESSION)

    asyncio.run(converse())
    assert answers == ["Result: sunny in Oslo", "Result: sunny in Lima"]

    key, ledger, tenant = adk.key(USER, SESSION), adk.ledger, adk.tenant
    trail = ledger.audit(key, tenant=tenant)
    kinds = [e.event_type for e in trail]
    # The session's first message, one event per ADK event, and the delete
    assert kinds == ["SessionStarted"] + ["MessagesAppended"] * 9 + ["HistoryCleared"]
    assert ledger.get_all(key, tenant=tenant) == []
    before_delete = trail[-2].version
    replayed = ledger.get_all(key, tenant=tenant, as_of_version=before_delete)
    adk_events = [m.additional_kwargs["adk_event"] for m in replayed[1:]]
    assert [e["author"] for e in adk_events] == ["user", "bot", "bot", "bot"] * 2
    assert adk_events[1]["content"]["parts"][0]["function_call"]["args"] == {"city": "Oslo"}
    assert adk_events[2]["content"]["parts"][0]["function_response"]["response"] == {
        "result": "sunny in Oslo"
    }

    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env["LEDGER_DATABASE_URL"] = adk.database_url
    export = tmp_path / "session.jsonl"
    done = run_cli(env, "export", key, "--tenant", tenant, "--output", str(export))
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in export.read_text(encoding="utf-8").splitlines()]
    assert len(lines) == len(trail) + 2  # a header, every event, a trailer
    exported = json.dumps(lines, ensure_ascii=False)
    for text in ("weather Oslo", "sunny in Lima", "Result: sunny in Lima", "HistoryCleared"):
        assert text in exported
    checked = run_cli(env, "verify-export", str(export))
    assert checked.returncode == 0, checked.stdout + checked.stderr
