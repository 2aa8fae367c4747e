"""LedgerMemory saves and loads as ChatMemoryBuffer does (its `to_string`/`from_string` and
`to_dict`/`from_dict` tests, the same calls and assertions on both), with no argument
on load and no LEDGER_API_KEY: in process (a database URL) and over HTTP. What is saved
names the API key by fingerprint only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest
from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from workflows.context.serializers import JsonSerializer

from session_ledger.api.llamaindex import LedgerMemory
from session_ledger.api.llamaindex.api_keys import fingerprint
from session_ledger.domain.errors import InvalidInput
from tests.conftest import make_ledger, make_settings
from tests.e2e.conftest import Deployment
from tests.llamaindex.conftest import Where

USER_CHAT_MESSAGE = ChatMessage(role="user", content="first message")


def saveable(where: Where, tmp_path: Path) -> dict[str, Any]:
    """Where a memory that can be saved lives: in process, a database URL (an in-process
    `ledger=` is handed back on load, test_serialization_and_responses.py); or the server."""
    if where.name != "local":
        return where.kwargs
    settings = make_settings("sqlite", tmp_path)
    make_ledger(settings).close()
    return {"url": settings.database_url}


def save_and_load(memory: Any, how: str) -> Any:
    if how == "string":
        return type(memory).from_string(memory.to_string())
    return type(memory).from_dict(memory.to_dict())


@pytest.mark.parametrize("how", ["string", "dict"])
def test_save_load_as_chat_memory_buffer(
    where: Where, tmp_path: Path, how: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_API_KEY", raising=False)
    target = saveable(where, tmp_path)
    key = where.prefix + "saved"
    buffer = ChatMemoryBuffer.from_defaults(chat_history=[USER_CHAT_MESSAGE], token_limit=5)
    ours = LedgerMemory.from_defaults(
        chat_history=[USER_CHAT_MESSAGE], token_limit=5, chat_store_key=key, **target
    )
    loaded = {}
    for memory in (buffer, ours):
        new_memory = save_and_load(memory, how)
        assert len(new_memory.get()) == 1
        assert new_memory.token_limit == 5
        loaded[type(memory)] = new_memory
    assert loaded[LedgerMemory].get() == loaded[ChatMemoryBuffer].get() == [USER_CHAT_MESSAGE]
    assert loaded[LedgerMemory].chat_store_key == key


def test_a_workflow_context_restores_a_memory_given_its_key_as_api_key(
    where: Where, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("LEDGER_API_KEY", raising=False)
    target = saveable(where, tmp_path)
    memory = LedgerMemory.from_defaults(
        chat_store_key=where.prefix + "ctx", token_limit=99, **target
    )
    memory.put(USER_CHAT_MESSAGE)
    serializer = JsonSerializer()  # what a workflow Context saves its memory with
    saved = serializer.serialize({"memory": memory})
    if "api_key" in target:
        assert target["api_key"] not in saved
        assert json.loads(saved)["memory"]["value"]["api_key_fingerprint"] == fingerprint(
            target["api_key"]
        )
    restored = serializer.deserialize(saved)["memory"]
    assert isinstance(restored, LedgerMemory) and restored.token_limit == 99
    assert restored.get_all() == [USER_CHAT_MESSAGE]
    assert restored.chat_store.get_messages(memory.chat_store_key) == [USER_CHAT_MESSAGE]


RESTORE = """
import sys
from session_ledger.api.llamaindex import LedgerMemory
try:
    print(LedgerMemory.from_string(sys.stdin.read()).get_all()[0].content)
except Exception as e:
    print(type(e).__name__, e)
"""


def test_another_process_restores_with_the_same_key_only(
    deployment: Deployment, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A process that was never given the key takes LEDGER_API_KEY, if it is that key:
    another key would act for another tenant or principal."""
    if deployment.store != "sqlite":
        pytest.skip("one store is enough: nothing here depends on it")
    agent, other = deployment.keys["a_agent"], deployment.keys["b_agent"]
    memory = LedgerMemory.from_defaults(
        chat_store_key=f"li/{uuid.uuid4().hex[:10]}/p", url=deployment.base_url, api_key=agent
    )
    memory.put(USER_CHAT_MESSAGE)
    saved = memory.to_string()
    assert agent not in saved

    def restore(env_key: str | None) -> str:
        if env_key is None:
            monkeypatch.delenv("LEDGER_API_KEY", raising=False)
        else:
            monkeypatch.setenv("LEDGER_API_KEY", env_key)
        done = subprocess.run(
            [sys.executable, "-c", RESTORE], input=saved, capture_output=True, text=True,
            timeout=60, check=True,
        )  # fmt: skip
        return done.stdout.strip()

    assert restore(agent) == "first message"
    assert restore(None).startswith("InvalidInput no API key")
    refused = restore(other)
    assert refused.startswith("InvalidInput the saved adapter used the API key")
    assert fingerprint(agent) in refused and other not in refused
    with pytest.raises(InvalidInput, match="another key"):  # here too, unless given
        monkeypatch.setenv("LEDGER_API_KEY", other)
        LedgerMemory.from_dict({**memory.to_dict(), "api_key_fingerprint": "0" * 16})
    assert LedgerMemory.from_string(saved, api_key=agent).get_all() == [USER_CHAT_MESSAGE]
