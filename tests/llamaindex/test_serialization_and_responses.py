"""Saving and restoring the adapters (to_dict / from_dict, a workflow's serializer) keeps
no secret; recorded agent responses carry their sources into get_all and the audit trail."""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse
from llama_index.core.schema import NodeWithScore, TextNode
from llama_index.core.tools.types import ToolOutput
from workflows.context.serializers import JsonSerializer

from session_ledger.api.llamaindex import (
    LedgerChatStore,
    LedgerDBChatStore,
    LedgerMemory,
    arecord_response,
    record_response,
)
from session_ledger.domain.errors import InvalidInput
from tests.conftest import make_ledger, make_settings
from tests.e2e.conftest import Deployment
from tests.llamaindex.conftest import Where

HELLO = ChatMessage(role="user", content="hello")


def test_remote_memory_round_trips_without_its_api_key(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    api_key = deployment.keys["a_agent"]
    memory = LedgerMemory.from_defaults(
        chat_store_key="li/serialized", url=deployment.base_url, api_key=api_key, token_limit=99
    )
    memory.set([HELLO])
    saved = memory.to_dict()
    assert api_key not in json.dumps(saved)
    assert saved["url"] == deployment.base_url and saved["token_limit"] == 99

    monkeypatch.delenv("LEDGER_API_KEY", raising=False)
    # This process was given the key: it finds it by the fingerprint saved (another
    # process needs it passed or in LEDGER_API_KEY: test_memory_save_load.py).
    assert LedgerMemory.from_dict(saved).get_all() == [HELLO]
    assert LedgerMemory.from_dict(saved, api_key=api_key).get_all() == [HELLO]
    monkeypatch.setenv("LEDGER_API_KEY", api_key)
    restored = LedgerMemory.from_dict(saved)
    assert (restored.chat_store_key, restored.token_limit) == ("li/serialized", 99)
    assert restored.get_all() == [HELLO]
    # A workflow Context saves its memory with this serializer.
    serializer = JsonSerializer()
    again = serializer.deserialize(serializer.serialize(memory))
    assert isinstance(again, LedgerMemory) and again.get_all() == [HELLO]


@pytest.mark.parametrize("adapter", [LedgerChatStore, LedgerDBChatStore, LedgerMemory])
def test_local_adapters_round_trip_by_database_url(tmp_path: Path, adapter: Any) -> None:
    settings = make_settings("sqlite", tmp_path)
    make_ledger(settings).close()
    first = adapter(url=settings.database_url, tenant="t1", actor="agent-7")
    saved = first.to_dict()
    assert saved["class_name"] == adapter.__name__
    restored = adapter.from_dict(json.loads(json.dumps(saved)))
    assert (restored.url, restored.tenant, restored.actor) == (
        settings.database_url, "t1", "agent-7"
    )  # fmt: skip
    assert restored._backend.ledger is first._backend.ledger  # one Ledger per URL


def test_an_in_process_ledger_is_handed_back_on_restore(local_ledger: Any) -> None:
    saved = LedgerMemory.from_defaults(chat_store_key="k", ledger=local_ledger).to_dict()
    assert saved["url"] is None
    with pytest.raises(InvalidInput, match="ledger="):
        LedgerMemory.from_dict(saved)
    assert LedgerMemory.from_dict(saved, ledger=local_ledger).chat_store_key == "k"


@pytest.mark.postgres
def test_a_database_password_is_not_saved_and_comes_from_the_environment(
    fresh_postgres_url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = make_settings("sqlite", tmp_path, database_url=fresh_postgres_url)
    make_ledger(settings).close()
    with_password = fresh_postgres_url.replace("postgres@", "postgres:s3cret-pw@", 1)
    memory = LedgerMemory.from_defaults(chat_store_key="k", url=with_password)
    memory.put(HELLO)
    saved = memory.to_dict()
    assert "s3cret-pw" not in json.dumps(saved) and saved["url"] == fresh_postgres_url
    monkeypatch.setenv("LEDGER_DATABASE_URL", with_password)
    assert LedgerMemory.from_dict(saved).get_all() == [HELLO]


def test_a_url_password_is_never_serialized() -> None:
    from session_ledger.api.llamaindex.memory_backends import without_password

    assert without_password("postgresql://u:s3cret@h:5/db") == "postgresql://u@h:5/db"
    assert without_password("https://x:y@ledger.example") == "https://x@ledger.example"
    assert without_password("sqlite:///a/b.db") == "sqlite:///a/b.db"


@dataclass
class Hits:
    """A tool's own result type: kept by field."""

    total: int
    first: TextNode


def agent_response() -> AgentChatResponse:
    tool = ToolOutput(tool_name="search", content="found 2 documents",
                      raw_input={"query": "refund policy", "when": Path("/x")},
                      raw_output=Hits(2, TextNode(id_="doc-1", text="a")))  # fmt: skip
    nodes = [NodeWithScore(node=TextNode(id_="doc-1", text="a", metadata={"file": "p.md"}),
                           score=0.91),
             NodeWithScore(node=TextNode(id_="doc-2", text="b"), score=None)]  # fmt: skip
    return AgentChatResponse(response="Refunds take 5 days.", sources=[tool], source_nodes=nodes)


def test_recorded_response_shows_its_sources_in_history_and_audit(where: Where) -> None:
    key = where.prefix + "answer"
    memory = LedgerMemory.from_defaults(chat_store_key=key, **where.kwargs)
    memory.put(HELLO)
    message = record_response(memory, agent_response())
    stored = memory.get_all()[-1]
    assert stored == message and stored.content == "Refunds take 5 days."
    extra = stored.additional_kwargs
    source = dict(extra["sources"][0])
    raw = source.pop("raw_output")
    assert source == {"tool_name": "search", "content": "found 2 documents",
                      "raw_input": {"query": "refund policy", "when": "/x"},
                      "is_error": False}  # fmt: skip
    assert raw["total"] == 2 and raw["first"]["id_"] == "doc-1" and raw["first"]["text"] == "a"
    assert extra["source_nodes"] == [
        {"node_id": "doc-1", "score": 0.91, "text": "a", "metadata": {"file": "p.md"}},
        {"node_id": "doc-2", "score": None, "text": "b", "metadata": {}},
    ]
    last = where.ledger.audit(key)[-1]
    assert last.event_type == "MessagesAppended"
    assert last.changes["added"][0]["additional_kwargs"] == extra


def test_what_the_model_was_given_is_cut_to_the_budget_and_the_cut_recorded(
    local_ledger: Any,
) -> None:
    memory = LedgerMemory.from_defaults(chat_store_key="cut", ledger=local_ledger)
    long = "ü" * 50  # 100 bytes
    nodes = [NodeWithScore(node=TextNode(id_=f"n{i}", text=long), score=1.0) for i in range(3)]
    tool = ToolOutput(tool_name="t", content="c" * 10, raw_input={}, raw_output={"k": "v" * 20})
    response = AgentChatResponse(response="r", sources=[tool], source_nodes=nodes)
    extra = record_response(memory, response, max_bytes=150).additional_kwargs
    (source,) = extra["sources"]  # content 10 bytes, raw output 29: both whole
    assert source["content"] == "c" * 10 and source["raw_output"] == {"k": "v" * 20}
    assert "cut" not in source
    first, second, third = extra["source_nodes"]
    assert first["text"] == long and "cut" not in first  # 111 bytes left, then 11
    assert first["metadata"] == {}  # "{}": 2 bytes, 9 left
    assert second["text"] == "ü" * 4  # 8 of the 9 bytes (a character is never split)
    assert second["metadata"] == "{" and second["cut"] == {"text": 100, "metadata": 2}
    assert third["text"] == "" and third["metadata"] == ""
    assert third["cut"] == {"text": 100, "metadata": 2}
    assert third["node_id"] == "n2" and third["score"] == 1.0  # ids and scores always kept
    assert memory.get_all()[-1].additional_kwargs == extra
    # the in-process ledger's setting is the default budget
    limits = replace(local_ledger.limits, max_provenance_bytes=4)
    monkey = LedgerMemory.from_defaults(chat_store_key="cut2", ledger=local_ledger)
    original, local_ledger.limits = local_ledger.limits, limits
    try:
        kept = record_response(monkey, response).additional_kwargs
    finally:
        local_ledger.limits = original
    assert kept["sources"][0]["content"] == "cccc" and kept["sources"][0]["cut"]["content"] == 10


def test_a_streaming_response_is_recorded_once_finished(local_ledger: Any) -> None:
    memory = LedgerMemory.from_defaults(chat_store_key="s", ledger=local_ledger)
    streaming = StreamingAgentChatResponse(response="partial", sources=agent_response().sources)
    with pytest.raises(InvalidInput, match="not finished"):
        record_response(memory, streaming)
    assert memory.get_all() == []
    streaming.is_done, streaming.response = True, "Done streaming."
    recorded = asyncio.run(arecord_response(memory, streaming))
    assert memory.get_all() == [recorded]
    assert recorded.additional_kwargs["sources"][0]["tool_name"] == "search"
