"""Over HTTP the history comes a page at a time; the clients and the LlamaIndex adapters
follow each page's cursor, so `get_all` still returns every message, in order, of one
version. A server of its own with tiny pages: 3 messages, 1 KiB."""

from __future__ import annotations

import asyncio
import secrets
import uuid
from collections.abc import Iterator
from urllib.parse import quote

import pytest
from llama_index.core.base.llms.types import ChatMessage

from session_ledger.api.client import LedgerClient
from session_ledger.api.client_async import AsyncLedgerClient
from session_ledger.api.llamaindex import LedgerChatStore, LedgerMemory
from tests.e2e.conftest import Server, server_env

TEXTS = [f"m{i} " + ("long " * 300 if i in (4, 5) else "") for i in range(11)]


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, str]]:
    """(base URL, an agent key) of a server whose pages are tiny."""
    url = f"sqlite:///{tmp_path_factory.mktemp('pages') / 'ledger.db'}"
    admin = "sl_test_" + secrets.token_urlsafe(24)
    server = Server(server_env(url, LEDGER_BOOTSTRAP_KEY=admin, LEDGER_MAX_PAGE_MESSAGES="3",
                               LEDGER_MAX_ANSWER_BYTES="1024")).start()  # fmt: skip
    try:
        with LedgerClient(server.base_url, admin) as client:
            yield server.base_url, client.create_key("agent", name="pages").key
    finally:
        server.stop()


@pytest.fixture
def key(served: tuple[str, str]) -> str:
    key = f"pages/{uuid.uuid4().hex[:8]}"
    with LedgerClient(*served) as client:
        client.put_messages(key, [{"role": "user", "content": text} for text in TEXTS])
    return key


def test_the_clients_read_every_page(served: tuple[str, str], key: str) -> None:
    with LedgerClient(*served) as client:
        first = client.http.get(f"/v1/sessions/{quote(key, safe='')}/messages").json()
        assert len(first["messages"]) == 3 and first["next_cursor"]
        assert [m.content for m in client.get_all(key)] == TEXTS
        assert [m.content for m in client.get_all(key, offset=2, limit=6)] == TEXTS[2:8]
        assert [m.content for m in client.get_all(key, as_of_version=2)] == TEXTS

    async def read() -> list[str | None]:
        async with AsyncLedgerClient(*served) as client:
            return [m.content for m in await client.get_all(key)]

    assert asyncio.run(read()) == TEXTS


def test_llamaindex_reads_the_whole_history(served: tuple[str, str], key: str) -> None:
    url, api_key = served
    memory = LedgerMemory.from_defaults(chat_store_key=key, url=url, api_key=api_key)
    assert [m.content for m in memory.get_all()] == TEXTS
    assert [m.content for m in asyncio.run(memory.aget_all())] == TEXTS
    memory.put(ChatMessage(role="assistant", content="later"))
    assert [m.content for m in memory.get_all()] == [*TEXTS, "later"]
    store = LedgerChatStore(url=url, api_key=api_key)
    assert [m.content for m in store.get_messages(key)] == [*TEXTS, "later"]
    assert store.delete_message(key, 0).content == TEXTS[0]
    assert [m.content for m in store.get_messages(key)] == [*TEXTS[1:], "later"]
