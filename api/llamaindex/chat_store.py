"""`LedgerChatStore`: LlamaIndex's `BaseChatStore` on the ledger, answering as `SimpleChatStore`.

Each chat-store key is a session. Every write is one event with its actor in the audit
trail; a read-then-write (insert at an index, delete one message) names the version it
read, so it never acts on a history another writer has changed in between.
"""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.storage.chat_store.base import BaseChatStore

from . import plans
from .target import LedgerTarget, from_wire, from_wires, to_wire, to_wires


class LedgerChatStore(LedgerTarget, BaseChatStore):
    """A chat store whose keys are ledger sessions (local `Ledger` or a remote server)."""

    @classmethod
    def class_name(cls) -> str:
        return "LedgerChatStore"

    def set_messages(self, key: str, messages: list[LlamaMessage]) -> None:
        """Replace the key's history."""
        self._run(plans.set_messages, key, to_wires(messages))

    def get_messages(self, key: str) -> list[LlamaMessage]:
        """The key's history; [] for an unknown key."""
        return from_wires(self._run(plans.get_all, key))

    def add_message(self, key: str, message: LlamaMessage, idx: int | None = None) -> None:
        """Append `message`, or insert it at `idx` (as `list.insert`)."""
        if idx is None:
            self._run(plans.put_messages, key, [to_wire(message)])
        else:
            self._run(plans.insert_message, key, to_wire(message), idx)

    def delete_messages(self, key: str) -> list[LlamaMessage] | None:
        """Clear the key; the removed messages, None for an unknown key."""
        removed = self._run(plans.clear, key)
        return None if removed is None else from_wires(removed)

    def delete_message(self, key: str, idx: int) -> LlamaMessage | None:
        """Remove the message at `idx`; None for an unknown key or `idx` past the end."""
        return from_wire(self._run(plans.delete_at, key, idx, python_bounds=True))

    def delete_last_message(self, key: str) -> LlamaMessage | None:
        """Remove the newest message; None for an unknown key."""
        return from_wire(self._run(plans.delete_last, key))

    def get_keys(self) -> list[str]:
        """The keys not cleared, in the order they were made (SimpleChatStore's: a key
        cleared and written again keeps its place, where SimpleChatStore moves it last)."""
        return self._run(plans.present_keys)

    async def aset_messages(self, key: str, messages: list[LlamaMessage]) -> None:
        await self._arun(plans.set_messages, key, to_wires(messages))

    async def aget_messages(self, key: str) -> list[LlamaMessage]:
        return from_wires(await self._arun(plans.get_all, key))

    async def async_add_message(
        self, key: str, message: LlamaMessage, idx: int | None = None
    ) -> None:
        if idx is None:
            await self._arun(plans.put_messages, key, [to_wire(message)])
        else:
            await self._arun(plans.insert_message, key, to_wire(message), idx)

    async def adelete_messages(self, key: str) -> list[LlamaMessage] | None:
        removed = await self._arun(plans.clear, key)
        return None if removed is None else from_wires(removed)

    async def adelete_message(self, key: str, idx: int) -> LlamaMessage | None:
        return from_wire(await self._arun(plans.delete_at, key, idx, python_bounds=True))

    async def adelete_last_message(self, key: str) -> LlamaMessage | None:
        return from_wire(await self._arun(plans.delete_last, key))

    async def aget_keys(self) -> list[str]:
        return await self._arun(plans.present_keys)
