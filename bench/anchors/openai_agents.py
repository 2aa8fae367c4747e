"""OpenAI Agents SDK `SQLiteSession`: one row per item, WAL, an index on (session, id)."""

from __future__ import annotations

import asyncio
import copy
from typing import Any

from agents.memory import SQLiteSession

from ..stores import Context, Store


class AgentsSQLite(Store):
    name = "OpenAI Agents SQLiteSession"
    group = "peer"
    backend = "sqlite"
    window_note = "last N items (no token window); N = the buffer's window size"

    def open(self, ctx: Context) -> None:
        self.path = str(ctx.workdir / "openai-agents.db")
        self.window_rows = ctx.window_rows
        self.sessions: dict[str, SQLiteSession] = {}
        self.loop = asyncio.new_event_loop()

    def _session(self, session: str) -> SQLiteSession:
        handle = self.sessions.get(session)
        if handle is None:
            handle = SQLiteSession(session, self.path)
            self.sessions[session] = handle
        return handle

    def append(self, session: str, message: Any) -> None:
        self.loop.run_until_complete(self._session(session).add_items([message]))

    def writer(self) -> AgentsSQLite:
        handle = copy.copy(self)
        handle.loop = asyncio.new_event_loop()
        handle.sessions = {}
        return handle

    def release_writer(self, writer: Store) -> None:
        assert isinstance(writer, AgentsSQLite)
        for handle in writer.sessions.values():
            handle.close()
        writer.loop.close()

    def load(self, session: str, messages: list[Any]) -> None:
        self.loop.run_until_complete(self._session(session).add_items(messages))

    def window(self, session: str) -> int:
        coro = self._session(session).get_items(limit=self.window_rows)
        return len(self.loop.run_until_complete(coro))

    def history(self, session: str) -> int:
        return len(self.loop.run_until_complete(self._session(session).get_items()))

    def close(self) -> None:
        for handle in self.sessions.values():
            handle.close()
        self.loop.close()
