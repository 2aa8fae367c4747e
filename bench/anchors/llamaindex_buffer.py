"""LlamaIndex ChatMemoryBuffer over its chat stores: SimpleChatStore, SQLite, PostgreSQL.

Each store is driven as its documentation shows: a ChatMemoryBuffer per session
key, `put` to write, `get` for the token window, `get_all` for the history.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.llms import ChatMessage
from llama_index.core.memory import ChatMemoryBuffer
from llama_index.core.storage.chat_store import SimpleChatStore
from llama_index.core.storage.chat_store.base import BaseChatStore

from ..corpus import TOKEN_LIMIT, Message, tokenizer
from ..stores import Context, Store


class _BufferStore(Store):
    group = "peer"

    def _chat_store(self, ctx: Context) -> BaseChatStore:
        raise NotImplementedError

    def open(self, ctx: Context) -> None:
        self.store = self._chat_store(ctx)
        self.buffers: dict[str, ChatMemoryBuffer] = {}

    def _buffer(self, session: str) -> ChatMemoryBuffer:
        buffer = self.buffers.get(session)
        if buffer is None:
            buffer = ChatMemoryBuffer.from_defaults(
                chat_store=self.store,
                chat_store_key=session,
                token_limit=TOKEN_LIMIT,
                tokenizer_fn=tokenizer(),
            )
            self.buffers[session] = buffer
        return buffer

    def native(self, message: Message) -> Any:
        return ChatMessage(role=message["role"], content=message["content"])

    def append(self, session: str, message: Any) -> None:
        self._buffer(session).put(message)

    def load(self, session: str, messages: list[Any]) -> None:
        self.store.set_messages(session, messages)

    def window(self, session: str) -> int:
        return len(self._buffer(session).get())

    def history(self, session: str) -> int:
        return len(self._buffer(session).get_all())


class LlamaSimple(_BufferStore):
    name = "LlamaIndex SimpleChatStore + persist()"
    backend = "file"
    concurrent = False  # persist() rewrites one JSON file: threads would interleave writes
    history_note = "reads a dict in process memory; persist() writes without fsync"
    reads_process_memory = True

    def _chat_store(self, ctx: Context) -> BaseChatStore:
        self.path = str(ctx.workdir / "simple-chat-store.json")
        return SimpleChatStore()

    def append(self, session: str, message: Any) -> None:
        super().append(session, message)
        self.store.persist(self.path)

    def load(self, session: str, messages: list[Any]) -> None:
        super().load(session, messages)
        self.store.persist(self.path)


class LlamaSQLite(_BufferStore):
    name = "LlamaIndex SQLiteChatStore"
    backend = "sqlite"

    def _chat_store(self, ctx: Context) -> BaseChatStore:
        from llama_index.storage.chat_store.sqlite import SQLiteChatStore

        return SQLiteChatStore.from_params(database=str(ctx.workdir / "llamaindex-sqlite.db"))


class LlamaPostgres(_BufferStore):
    name = "LlamaIndex PostgresChatStore"
    backend = "postgres"
    schema = "bench_llamaindex"

    def _chat_store(self, ctx: Context) -> BaseChatStore:
        from llama_index.storage.chat_store.postgres import PostgresChatStore

        assert ctx.postgres_url is not None
        rest = ctx.postgres_url.split("://", 1)[1]
        return PostgresChatStore.from_params(
            connection_string=f"postgresql+psycopg://{rest}",
            async_connection_string=f"postgresql+asyncpg://{rest}",
            schema_name=self.schema,
        )

    def close(self) -> None:
        import sqlalchemy

        with self.store._session() as session:
            session.execute(sqlalchemy.text(f"DROP SCHEMA IF EXISTS {self.schema} CASCADE"))
            session.commit()
        self.store._session.kw["bind"].dispose()
