"""`LedgerDBChatStore`: the `AsyncDBChatStore` LlamaIndex's `Memory` class writes to.

    Memory.from_defaults(session_id="user-42", chat_store=LedgerDBChatStore(url=...))

ACTIVE and ARCHIVED are the ledger's own statuses: `archive_oldest_messages` is one
`MessagesArchived` event, and the archive stays readable (`status=ARCHIVED`).
Differences from `SQLAlchemyChatStore`, which the ledger's model makes necessary:
- `delete_message(key, idx)` takes a position in the active history (negative counts
  from the end), not a row id: ledger messages have no public ids yet.
- `set_messages` replaces the active history and keeps the archive (SQLAlchemy's
  deletes the archive too).
- Only ACTIVE messages can be added or set, and `delete_messages(status=ARCHIVED)` is
  refused: the archive only grows by archiving the oldest active messages.
- `delete_oldest_messages` is one `HistoryReplaced` event (the removed messages are in
  the audit trail).
"""

from __future__ import annotations

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.storage.chat_store.base_db import AsyncDBChatStore, MessageStatus

from . import plans
from .target import LedgerTarget, from_wire, from_wires, to_wires


class LedgerDBChatStore(LedgerTarget, AsyncDBChatStore):
    """The `Memory` class's store on the ledger (local `Ledger` or a remote server)."""

    @classmethod
    def class_name(cls) -> str:
        return "LedgerDBChatStore"

    async def get_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE,
        limit: int | None = None, offset: int | None = None,
    ) -> list[LlamaMessage]:  # fmt: skip
        """Messages with `status` (None: archived then active), oldest first."""
        value = None if status is None else MessageStatus(status).value
        return from_wires(await self._arun(plans.history_page, key, value, offset or 0, limit))

    async def count_messages(
        self, key: str, status: MessageStatus | None = MessageStatus.ACTIVE
    ) -> int:
        """How many messages have `status` (None: all); 0 for an unknown key."""
        value = None if status is None else MessageStatus(status).value
        return await self._arun(plans.count, key, value)

    async def add_message(
        self, key: str, message: LlamaMessage, status: MessageStatus = MessageStatus.ACTIVE
    ) -> None:
        """Append one active message."""
        await self.add_messages(key, [message], status)

    async def add_messages(
        self, key: str, messages: list[LlamaMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:  # fmt: skip
        """Append active messages, all or none, as one event."""
        plans.active_only(status, "add_messages")
        await self._arun(plans.put_messages, key, to_wires(messages))

    async def set_messages(
        self, key: str, messages: list[LlamaMessage],
        status: MessageStatus = MessageStatus.ACTIVE,
    ) -> None:  # fmt: skip
        """Replace the active history (the archive stays)."""
        plans.active_only(status, "set_messages")
        await self._arun(plans.set_messages, key, to_wires(messages))

    async def delete_message(self, key: str, idx: int) -> LlamaMessage | None:
        """Remove the active message at position `idx`; None if there is none."""
        return from_wire(await self._arun(plans.delete_at, key, idx, python_bounds=False))

    async def delete_messages(self, key: str, status: MessageStatus | None = None) -> None:
        """Clear the session (status None), or only its active messages (ACTIVE)."""
        if status is None:
            await self._arun(plans.clear, key)
            return
        plans.active_only(status, "delete_messages")
        await self._arun(plans.clear_active, key)

    async def delete_oldest_messages(self, key: str, n: int) -> list[LlamaMessage]:
        """Remove the `n` oldest active messages; returns them."""
        return from_wires(await self._arun(plans.take_oldest, key, n, archive=False))

    async def archive_oldest_messages(self, key: str, n: int) -> list[LlamaMessage]:
        """Move the `n` oldest active messages to the archive; returns them."""
        return from_wires(await self._arun(plans.take_oldest, key, n, archive=True))

    async def get_keys(self) -> list[str]:
        """The keys that hold messages (active or archived), sorted."""
        return await self._arun(plans.present_keys)
