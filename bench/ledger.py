"""session-ledger itself, in-process through its Ledger, on each of its stores."""

from __future__ import annotations

import base64
import os
from typing import Any

from .corpus import TOKEN_LIMIT, Message
from .stores import Context, Store

_LOAD_CHUNK = 1000  # bounded writes: one save of ~10,000 events is what PostgreSQL chokes on


class LedgerStore(Store):
    group = "ours"
    keeps_versions = True

    def __init__(self, backend: str, *, encrypted: bool = False) -> None:
        self.backend = backend
        self.encrypted = encrypted  # a master key: every session sealed (docs/compliance.md)
        self.name = f"session-ledger {backend}" + (" encrypted" if encrypted else "")

    def open(self, ctx: Context) -> None:
        from session_ledger.api.bootstrap import migrate, open_ledger
        from session_ledger.api.settings import Settings

        if self.backend == "memory":
            url = "memory://"
        elif self.backend == "sqlite":
            url = f"sqlite:///{ctx.workdir / 'ledger.db'}"
        else:
            assert ctx.postgres_url is not None
            url = ctx.postgres_url
        master = base64.b64encode(os.urandom(32)).decode("ascii") if self.encrypted else None
        settings = Settings(database_url=url, token_limit=TOKEN_LIMIT, master_key=master)
        migrate(settings)
        # An in-memory store has no tables until the Ledger that holds it makes them.
        self.ledger = open_ledger(settings)

    def native(self, message: Message) -> Any:
        from session_ledger.domain.messages import ChatMessage

        return ChatMessage.text(message["role"], message["content"])

    def append(self, session: str, message: Any) -> None:
        self.ledger.put(session, message)

    def load(self, session: str, messages: list[Any]) -> None:
        for start in range(0, len(messages), _LOAD_CHUNK):
            self.ledger.put_messages(session, messages[start : start + _LOAD_CHUNK])

    def window(self, session: str) -> int:
        return len(self.ledger.get(session, token_limit=TOKEN_LIMIT))

    def history(self, session: str) -> int:
        return len(self.ledger.get_all(session))

    def window_at(self, session: str, version: int) -> int:
        return len(self.ledger.get(session, token_limit=TOKEN_LIMIT, as_of_version=version))

    def history_at(self, session: str, version: int) -> int:
        return len(self.ledger.get_all(session, as_of_version=version))

    def load_versions(self, session: str, messages: list[Any], per_write: int) -> int:
        for start in range(0, len(messages), per_write):
            result = self.ledger.put_messages(session, messages[start : start + per_write])
        return result.version

    def close(self) -> None:
        self.ledger.close()
