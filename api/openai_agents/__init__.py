"""OpenAI Agents adapter (the `openai-agents` extra): a `Session` on the ledger.

    from session_ledger.api.openai_agents import LedgerSession
    session = LedgerSession("user-42", url="http://ledger:8080")   # or ledger=<Ledger>
    result = await Runner.run(agent, "Hello", session=session)

- `LedgerSession`: the `Session` protocol (`get_items`, `add_items`, `pop_item`,
  `clear_session`, `session_settings`), a drop-in for `SQLiteSession` that keeps every
  item in the ledger's events, popped and cleared ones included.
- `to_message` / `from_message`: how an item is stored as a ledger message (items.py).
"""

from .items import ITEM_KEY, InvalidItem, canonical_item, from_message, item_text, to_message
from .ledger_session import LedgerSession

__all__ = [
    "ITEM_KEY",
    "InvalidItem",
    "LedgerSession",
    "canonical_item",
    "from_message",
    "item_text",
    "to_message",
]
