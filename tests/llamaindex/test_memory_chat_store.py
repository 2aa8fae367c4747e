"""`LedgerMemory` is a `BaseChatStoreMemory`: code written against `ChatMemoryBuffer` that
reaches `memory.chat_store` with `memory.chat_store_key` reads and writes the same session."""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage
from llama_index.core.memory.types import BaseChatStoreMemory

from session_ledger.api.llamaindex import LedgerChatStore, LedgerMemory
from tests.llamaindex.conftest import Where


def test_chat_store_is_the_same_session(where: Where) -> None:
    key = where.prefix + "buffer"
    memory = LedgerMemory.from_defaults(chat_store_key=key, **where.kwargs)
    assert isinstance(memory, BaseChatStoreMemory)
    assert isinstance(memory.chat_store, LedgerChatStore)
    memory.put(ChatMessage(role="user", content="one"))
    memory.chat_store.add_message(memory.chat_store_key, ChatMessage(role="user", content="two"))
    assert [m.content for m in memory.get_all()] == ["one", "two"]
    assert [m.content for m in memory.chat_store.get_messages(key)] == ["one", "two"]
    assert key in memory.chat_store.get_keys()


def test_to_dict_leaves_the_chat_store_out_and_from_dict_rebuilds_it(where: Where) -> None:
    key = where.prefix + "saved"
    memory = LedgerMemory.from_defaults(chat_store_key=key, **where.kwargs)
    memory.put(ChatMessage(role="user", content="kept"))
    saved = memory.to_dict()
    assert "chat_store" not in saved
    extra = {k: v for k, v in where.kwargs.items() if k in ("ledger", "api_key")}
    restored = LedgerMemory.from_dict(saved, **extra)
    assert [m.content for m in restored.chat_store.get_messages(key)] == ["kept"]
