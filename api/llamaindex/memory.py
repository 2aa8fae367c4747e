"""`LedgerMemory`: a LlamaIndex `BaseChatStoreMemory` whose `get` is the ledger's context
window, and whose `chat_store` is a `LedgerChatStore` on the same ledger.

`get` returns what `ChatMemoryBuffer.get` returns for the same history, token limit and
tokenizer (exactly, where whitespace meets across two messages too: docs/python-api.md),
but reads only the newest messages' stored token counts (O(window))
instead of re-tokenizing the whole history on every turn. Every method has a native
async twin. `to_dict()` / `from_dict()` and `to_string()` / `from_string()` round-trip
(LlamaIndex workflows save memory that way) and never hold a secret; see `target` for
how the key comes back. Code
written against `ChatMemoryBuffer` that reaches `memory.chat_store` (with
`memory.chat_store_key`) reads and writes the same session.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.llms.llm import LLM
from llama_index.core.memory.chat_memory_buffer import DEFAULT_TOKEN_LIMIT_RATIO
from llama_index.core.memory.types import DEFAULT_CHAT_STORE_KEY, BaseChatStoreMemory
from pydantic import Field, field_validator

from session_ledger.domain.ledger import Ledger

from . import plans
from .chat_store import LedgerChatStore
from .target import LedgerTarget, from_wires, to_wire, to_wires


class LedgerMemory(LedgerTarget, BaseChatStoreMemory):
    """Chat memory in one ledger session: a drop-in for `ChatMemoryBuffer`."""

    chat_store: LedgerChatStore = Field(  # type: ignore[assignment]
        default=None,
        exclude=True,  # made from the fields below: saving it would save them twice
        description="A LedgerChatStore on the same ledger; `chat_store_key` is its key.",
    )
    chat_store_key: str = Field(
        default=DEFAULT_CHAT_STORE_KEY, description="The session key of this conversation."
    )
    token_limit: int | None = Field(
        default=None,
        description="Token limit of `get`; None: the ledger's (LEDGER_TOKEN_LIMIT, 3000).",
    )

    @field_validator("token_limit")
    @classmethod
    def _token_limit_above_zero(cls, value: int | None) -> int | None:
        """Refused when the memory is made, as ChatMemoryBuffer refuses it (not at `get`)."""
        if value is not None and value < 1:
            raise ValueError("Token limit must be set and greater than 0.")
        return value

    def __init__(self, **data: Any) -> None:
        data.pop("chat_store", None)  # always the ledger's own, on this memory's connection
        super().__init__(**data)
        self.chat_store = LedgerChatStore(
            backend=self._backend, url=self.url, tenant=self.tenant, actor=self.actor
        )

    @classmethod
    def class_name(cls) -> str:
        return "LedgerMemory"

    @classmethod
    def from_defaults(  # type: ignore[override]
        cls,
        chat_history: list[LlamaMessage] | None = None,
        llm: LLM | None = None,
        chat_store_key: str = DEFAULT_CHAT_STORE_KEY,
        token_limit: int | None = None,
        tokenizer_fn: Callable[[str], Any] | None = None,
        *,
        ledger: Ledger | None = None,
        url: str | None = None,
        api_key: str | None = None,
        tenant: str | None = None,
        actor: str | None = None,
    ) -> LedgerMemory:
        """As `ChatMemoryBuffer.from_defaults`, plus where the session lives: `ledger=`
        (in-process) or `url=` (a server, or a database URL). `chat_history` replaces the
        session's history; `llm` sets the token limit to 3/4 of its context window."""
        if llm is not None and token_limit is None:
            token_limit = int(llm.metadata.context_window * DEFAULT_TOKEN_LIMIT_RATIO)
        memory = cls(
            chat_store_key=chat_store_key, token_limit=token_limit, ledger=ledger, url=url,
            api_key=api_key, tenant=tenant, actor=actor, tokenizer_fn=tokenizer_fn,
        )  # fmt: skip
        if chat_history is not None:
            memory.set(chat_history)
        return memory

    def to_string(self) -> str:
        """The settings as JSON (ChatMemoryBuffer.to_string); no secret, no messages."""
        return self.to_json()

    @classmethod
    def from_string(cls, json_str: str, **kwargs: Any) -> LedgerMemory:
        """Restore from `to_string`; `kwargs` as `from_dict`'s."""
        return cls.from_json(json_str, **kwargs)

    def get(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[LlamaMessage]:
        """The newest messages within the token limit (ChatMemoryBuffer.get)."""
        window = self._run(plans.get, self.chat_store_key, self.token_limit, initial_token_count)
        return from_wires(window)

    async def aget(
        self, input: str | None = None, initial_token_count: int = 0, **kwargs: Any
    ) -> list[LlamaMessage]:
        window = await self._arun(
            plans.get, self.chat_store_key, self.token_limit, initial_token_count
        )
        return from_wires(window)

    def get_all(self) -> list[LlamaMessage]:
        """The whole history, oldest first."""
        return from_wires(self._run(plans.get_all, self.chat_store_key))

    async def aget_all(self) -> list[LlamaMessage]:
        return from_wires(await self._arun(plans.get_all, self.chat_store_key))

    def put(self, message: LlamaMessage) -> None:
        """Append one message."""
        self._run(plans.put_messages, self.chat_store_key, [to_wire(message)])

    async def aput(self, message: LlamaMessage) -> None:
        await self._arun(plans.put_messages, self.chat_store_key, [to_wire(message)])

    def put_messages(self, messages: list[LlamaMessage]) -> None:
        """Append messages, all or none, as one write (LlamaIndex's default loops `put`)."""
        self._run(plans.put_messages, self.chat_store_key, to_wires(messages))

    async def aput_messages(self, messages: list[LlamaMessage]) -> None:
        await self._arun(plans.put_messages, self.chat_store_key, to_wires(messages))

    def set(self, messages: list[LlamaMessage]) -> None:
        """Replace the history (the old one stays in the audit trail)."""
        self._run(plans.set_messages, self.chat_store_key, to_wires(messages))

    async def aset(self, messages: list[LlamaMessage]) -> None:
        await self._arun(plans.set_messages, self.chat_store_key, to_wires(messages))

    def reset(self) -> None:
        """Clear the history; nothing happens to a session that holds none."""
        self._run(plans.clear, self.chat_store_key)

    async def areset(self) -> None:
        await self._arun(plans.clear, self.chat_store_key)
