"""10,000 random ADK events come back from the ledger byte-equal (canonical JSON), in
process on SQLite and PostgreSQL and over HTTP: every part kind (text, thoughts,
function calls and responses, inline bytes, files, code and its result), actions with
state and artifact deltas, metadata, odd Unicode and deep JSON.

The events are written in batches straight through the ledger (what `append_event`
writes, `to_message`), so the run takes seconds; test_session_service.py writes
through `append_event` itself."""

from __future__ import annotations

import asyncio
import functools
import json
import random
from typing import Any

import pytest
from google.adk.events.event import Event
from google.adk.events.event_actions import EventActions
from google.adk.sessions.base_session_service import GetSessionConfig
from google.genai import types

from session_ledger.api.google_adk import to_message
from tests.google_adk.conftest import Target

EVENTS = 10_000
BATCH = 500  # messages a write in process; over HTTP the test server's limit, 50
USER = "round-trip"
ODD_TEXT = ["", " ", "ü", "✓", "😀", "\u202e", "a\nb", '"', "\\", "\t", "שלום", "日本", "\u00a0"]


def canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def text(rng: random.Random) -> str:
    return "".join(rng.choice([*ODD_TEXT, "word", "x" * rng.randint(1, 40)])
                   for _ in range(rng.randint(0, 8)))  # fmt: skip


def json_value(rng: random.Random, depth: int = 0) -> Any:
    kinds = ["str", "int", "float", "bool", "null"] + (["list", "dict"] if depth < 4 else [])
    kind = rng.choice(kinds)
    if kind == "str":
        return text(rng)
    if kind == "int":
        return rng.choice([0, -1, 2**53 + 1, rng.randint(-(10**6), 10**6)])
    if kind == "float":
        return rng.choice([0.5, -1e-9, 1e300, rng.uniform(-1e6, 1e6)])
    if kind == "bool":
        return rng.random() < 0.5
    if kind == "null":
        return None
    if kind == "list":
        return [json_value(rng, depth + 1) for _ in range(rng.randint(0, 4))]
    return {text(rng) + str(i): json_value(rng, depth + 1) for i in range(rng.randint(0, 4))}


def part(rng: random.Random, i: int) -> types.Part:
    kind = rng.randrange(8)
    if kind == 0:
        return types.Part(text=text(rng))
    if kind == 1:
        return types.Part(text=text(rng), thought=True)
    if kind == 2:
        args = {f"a{j}": json_value(rng) for j in range(rng.randint(0, 3))}
        return types.Part(function_call=types.FunctionCall(id=f"c{i}", name="tool", args=args))
    if kind == 3:
        response = {"result": json_value(rng)}
        call = types.FunctionResponse(id=f"c{i}", name="tool", response=response)
        return types.Part(function_response=call)
    if kind == 4:
        return types.Part.from_bytes(data=rng.randbytes(rng.randint(0, 64)), mime_type="image/png")
    if kind == 5:
        return types.Part(file_data=types.FileData(file_uri=f"gs://b/{i}", mime_type="text/plain"))
    if kind == 6:
        code = types.ExecutableCode(code=f"print({i})", language=types.Language.PYTHON)
        return types.Part(executable_code=code)
    result = types.CodeExecutionResult(outcome=types.Outcome.OUTCOME_OK, output=text(rng))
    return types.Part(code_execution_result=result)


def random_event(rng: random.Random, i: int) -> Event:
    fields: dict[str, Any] = {
        "invocation_id": f"inv-{i // 7}", "author": rng.choice(["user", "agent", "sub.agent"]),
        "timestamp": 1_700_000_000 + i + rng.random(),
    }  # fmt: skip
    if rng.random() < 0.9:
        role = "user" if fields["author"] == "user" else "model"
        parts = [part(rng, i) for _ in range(rng.randint(1, 3))]
        fields["content"] = types.Content(role=role, parts=parts)
    if rng.random() < 0.5:
        fields["actions"] = EventActions(
            state_delta={f"k{j}": json_value(rng) for j in range(rng.randint(0, 3))},
            artifact_delta={f"file{j}": rng.randint(0, 9) for j in range(rng.randint(0, 2))},
            transfer_to_agent=rng.choice([None, "other"]),
            escalate=rng.choice([None, True, False]),
            skip_summarization=rng.choice([None, True]),
        )
    if rng.random() < 0.3:
        fields["usage_metadata"] = types.GenerateContentResponseUsageMetadata(
            prompt_token_count=rng.randint(0, 999), total_token_count=rng.randint(0, 999)
        )
    if rng.random() < 0.2:
        fields["custom_metadata"] = {text(rng) + "k": json_value(rng)}
    if rng.random() < 0.1:
        fields["long_running_tool_ids"] = {f"c{i}"}  # (one id: a set's order is its own)
    if rng.random() < 0.1:
        fields.update(branch="root.sub", error_code="E1", error_message=text(rng))
    if rng.random() < 0.1:
        fields.update(turn_complete=True, interrupted=rng.random() < 0.5)
    return Event(**fields)


@functools.cache
def random_events() -> tuple[list[Event], list[dict[str, Any]]]:
    """The events (made once for every target) and ADK's JSON of each."""
    rng = random.Random(54)
    events = [random_event(rng, i) for i in range(EVENTS)]
    return events, [e.model_dump(mode="json", exclude_none=True) for e in events]


@pytest.mark.slow  # (ADK's own validation of 10,000 events: seconds on an idle machine)
def test_ten_thousand_random_events_come_back_byte_equal(adk: Target) -> None:
    events, dumps = random_events()
    sessions = adk.service()
    run = asyncio.run
    made = run(sessions.create_session(app_name=adk.app, user_id=USER, session_id="all"))
    key = adk.key(USER, "all")
    messages = [to_message(e, {"adk_state_at": 0}) for e in events]
    version = int(made._storage_update_marker.split(":")[0])  # type: ignore[union-attr]
    batch = 50 if adk.remote else BATCH
    for start in range(0, EVENTS, batch):
        written = sessions.store.append(key, messages[start : start + batch], version)
        version = written.version

    read: dict[str, Any] = {}

    async def read_back() -> None:  # (asyncio.run returns None: it formats a task's result)
        read["all"] = await sessions.get_session(app_name=adk.app, user_id=USER, session_id="all")
        read["recent"] = await sessions.get_session(
            app_name=adk.app, user_id=USER, session_id="all",
            config=GetSessionConfig(num_recent_events=50),
        )  # fmt: skip

    run(read_back())
    got, recent = read["all"], read["recent"]
    assert got is not None and len(got.events) == EVENTS
    back = [e.model_dump(mode="json", exclude_none=True) for e in got.events]
    assert [canonical(d) for d in back] == [canonical(d) for d in dumps]
    assert got.events == events
    # The ledger holds each event exactly as ADK dumped it
    stored = adk.ledger.get_all(key, tenant=adk.tenant, offset=1)
    assert [canonical(m.additional_kwargs["adk_event"]) for m in stored] == [
        canonical(d) for d in dumps
    ]
    # The bytes of inline data too (base64 in the JSON)
    blobs = [p.inline_data.data for e in events if e.content for p in e.content.parts or []
             if p.inline_data]  # fmt: skip
    blobs_back = [p.inline_data.data for e in got.events if e.content
                  for p in e.content.parts or [] if p.inline_data]  # fmt: skip
    assert blobs == blobs_back and any(blobs)
    assert recent is not None and recent.events == events[-50:]


def test_an_events_write_key_is_its_id_or_its_ids_digest() -> None:
    """What an Idempotency-Key header carries: visible ASCII, at most 256 characters."""
    from session_ledger.api.google_adk.layout import event_write_key

    assert event_write_key("e-1") == "adk-event:e-1"
    for odd in ("évènement", "a b", "x" * 201, "\ud800", ""):
        key = event_write_key(odd)
        assert key.startswith("adk-event-sha256:") and len(key) == 81
        assert all("!" <= c <= "~" for c in key)
    assert event_write_key("a b") != event_write_key("a  b")
