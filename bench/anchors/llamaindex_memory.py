"""LlamaIndex's newer `Memory` class over its SQLAlchemy chat store (aiosqlite file).

`Memory.put` archives the oldest messages once the active ones pass
token_limit x chat_history_token_ratio, so `get` reads a short active queue
while `get_all()` (status None) returns active and archived messages.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import Memory
from llama_index.core.storage.chat_store.sql import SQLAlchemyChatStore

from ..corpus import TOKEN_LIMIT, Message, tokenizer
from ..stores import Context, Store

_LOAD_CHUNK = 500


class LlamaMemory(Store):
    name = "LlamaIndex Memory + SQLAlchemy SQLite"
    group = "peer"
    backend = "sqlite"
    # Its sync methods run coroutines on the calling thread's event loop, and the
    # aiosqlite engine is bound to the loop that first used it.
    concurrent = False
    window_note = "active queue (older messages archived on put)"

    def open(self, ctx: Context) -> None:
        self.store = SQLAlchemyChatStore(
            table_name="llama_index_memory",
            async_database_uri=f"sqlite+aiosqlite:///{ctx.workdir / 'llamaindex-memory.db'}",
        )
        self.memories: dict[str, Memory] = {}

    def _memory(self, session: str) -> Memory:
        memory = self.memories.get(session)
        if memory is None:
            memory = Memory.from_defaults(
                session_id=session,
                token_limit=TOKEN_LIMIT,
                tokenizer_fn=tokenizer(),
                chat_store=self.store,
            )
            self.memories[session] = memory
        return memory

    def native(self, message: Message) -> Any:
        return ChatMessage(role=message["role"], content=message["content"])

    def append(self, session: str, message: Any) -> None:
        self._memory(session).put(message)

    def load(self, session: str, messages: list[Any]) -> None:
        memory = self._memory(session)
        for start in range(0, len(messages), _LOAD_CHUNK):
            memory.put_messages(messages[start : start + _LOAD_CHUNK])

    def window(self, session: str) -> int:
        return len(self._memory(session).get())

    def history(self, session: str) -> int:
        return len(self._memory(session).get_all(status=None))

    def close(self) -> None:
        from llama_index.core.async_utils import asyncio_run

        if self.store._async_engine is not None:
            asyncio_run(self.store._async_engine.dispose())
