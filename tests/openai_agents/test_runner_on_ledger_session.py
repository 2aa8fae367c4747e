"""An OpenAI Agents `Runner` keeps its conversation in a `LedgerSession` (a scripted
model, no network): the model is given the history the session holds, and afterwards
the audit trail, the past versions and a verified export show every item, the popped
ones included."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from agents import Agent, Runner, function_tool

from session_ledger.api.openai_agents import ITEM_KEY, canonical_item, from_message
from session_ledger.projections.export import export_session
from tests.openai_agents.conftest import Where
from tests.openai_agents.fake_model import WeatherModel

CLI = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]


@function_tool
def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def canonical(items: list[Any]) -> list[str]:
    return [canonical_item(i) for i in items]


def test_a_runner_keeps_its_items_in_the_ledger(where: Where, tmp_path: Path) -> None:
    model = WeatherModel()
    agent = Agent(name="forecaster", model=model, tools=[weather])
    session = where.session("runner")

    async def converse() -> tuple[list[Any], list[Any], list[Any]]:
        first = await Runner.run(agent, "weather Zürich", session=session)
        assert first.final_output == "It is sunny in Zürich."
        await Runner.run(agent, "thanks", session=session)
        before_undo = await session.get_items()
        # Undo the last turn (the SDK's "correction" pattern): two pops.
        undone = [await session.pop_item(), await session.pop_item()]
        await Runner.run(agent, "weather Oslo", session=session)
        return before_undo, undone, await session.get_items()

    before_undo, undone, final = asyncio.run(converse())
    kinds = [i.get("type", i.get("role")) for i in before_undo]
    assert kinds == ["user", "reasoning", "function_call", "function_call_output", "message",
                     "user", "message"]  # fmt: skip
    assert [i.get("content") for i in undone] == [before_undo[-1]["content"], "thanks"]
    assert final[:5] == before_undo[:5] and final[5] == {"role": "user", "content": "weather Oslo"}
    # The model was given the session's history before each new input.
    assert canonical(model.inputs[-1][:6]) == canonical(final[:6])

    ledger, key = where.ledger, session.key
    trail = ledger.audit(key)
    types = [e.event_type for e in trail]
    assert types.count("MessageRemoved") == 2
    removed = [
        from_message(e.changes["removed"]) for e in trail if e.event_type == "MessageRemoved"
    ]
    assert canonical(removed) == canonical(undone)
    # The history as the model was given it before the undo, replayed.
    undo_version = types.index("MessageRemoved")  # the version before the first removal
    then = [from_message(m.to_dict()) for m in ledger.get_all(key, as_of_version=undo_version)]
    assert canonical(then) == canonical(before_undo)

    export = tmp_path / "runner.jsonl"
    export.write_bytes(b"".join(export_session(ledger, key)))
    checked = subprocess.run([*CLI, "verify-export", str(export)], capture_output=True,
                             text=True, timeout=120, check=False)  # fmt: skip
    assert checked.returncode == 0, checked.stdout + checked.stderr
    events = [json.loads(line) for line in export.read_text("utf-8").splitlines()[1:-1]]
    added = [from_message(m) for e in events if e["type"] == "MessagesAppended"
             for m in e["payload"]["messages"]]  # fmt: skip
    assert canonical(added) == canonical(before_undo + final[5:])  # every item ever added
    assert [e["payload"]["message"]["additional_kwargs"].get(ITEM_KEY) for e in events
            if e["type"] == "MessageRemoved"] == [undone[0], None]  # fmt: skip
