"""LlamaIndex adapters (the `llamaindex` extra): chat stores and a memory on the ledger.

    from session_ledger.api.llamaindex import LedgerMemory
    memory = LedgerMemory.from_defaults(chat_store_key="user-42", url="http://ledger:8080")

- `LedgerChatStore`: `BaseChatStore`, answering as `SimpleChatStore`.
- `LedgerDBChatStore`: `AsyncDBChatStore`, the store of LlamaIndex's `Memory` class.
- `LedgerMemory`: `BaseChatStoreMemory`, `ChatMemoryBuffer`'s window served by the ledger;
  its `chat_store` is a `LedgerChatStore` on the same session.
- `record_response`: an agent's answer with its tool outputs and source nodes.
- `tee_tokens`, `atee_tokens`, `tee_response`, `tee_events`: a streamed answer handed on
  unchanged and recorded as a stream of the session (in-process `Ledger`).
Each works on an in-process `Ledger` (`ledger=`, or a database `url=`) or on a
session-ledger server (`url="http(s)://..."`, API key from `api_key=` or LEDGER_API_KEY).
"""

from .api_keys import API_KEY_ENV
from .chat_store import LedgerChatStore
from .db_chat_store import LedgerDBChatStore
from .memory import LedgerMemory
from .responses import arecord_response, record_response, response_message
from .tee import atee_tokens, tee_events, tee_response, tee_tokens

__all__ = [
    "API_KEY_ENV",
    "LedgerChatStore",
    "LedgerDBChatStore",
    "LedgerMemory",
    "arecord_response",
    "atee_tokens",
    "record_response",
    "response_message",
    "tee_events",
    "tee_response",
    "tee_tokens",
]
