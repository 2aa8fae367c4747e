"""The live tails' hub: a commit wakes this process's tails of its session, and only
them; with no tail waiting, a writer's thread does not wake the event loop at all."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.live_hub import LiveHub
from session_ledger.api.settings import Settings
from session_ledger.domain.session import session_id

MESSAGE = [{"role": "user", "content": "hi"}]


def test_a_commit_wakes_the_tails_of_its_session_and_no_one_else(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}", auto_migrate=True)
    ledger = open_ledger(settings)

    async def run() -> tuple[int, bool, bool, bool]:
        loop = asyncio.get_running_loop()
        wakes = 0  # the hub's wake-ups of the loop (a worker thread's end wakes it too)
        call_soon_threadsafe = loop.call_soon_threadsafe

        def counting(callback: Any, *args: Any) -> Any:
            nonlocal wakes
            wakes += callback == hub._wake
            return call_soon_threadsafe(callback, *args)

        loop.call_soon_threadsafe = counting  # type: ignore[method-assign]
        hub = LiveHub(ledger, settings.database_url, poll_seconds=60)
        hub.start()
        try:
            await asyncio.to_thread(ledger.put_messages, "quiet", MESSAGE)  # no tail yet
            unwoken = wakes
            mine = hub.subscribe(session_id(settings.default_tenant, "quiet"))
            await asyncio.to_thread(ledger.put_messages, "other", MESSAGE)
            await asyncio.sleep(0.05)
            other_woke = mine.is_set()
            await asyncio.to_thread(ledger.put_messages, "quiet", MESSAGE)
            await asyncio.wait_for(mine.wait(), 5)
            everything = hub.subscribe_all()
            await asyncio.to_thread(ledger.put_messages, "third", MESSAGE)
            await asyncio.wait_for(everything.wait(), 5)
            return unwoken, other_woke, mine.is_set(), everything.is_set()
        finally:
            await hub.stop()

    try:
        assert asyncio.run(run()) == (0, False, True, True)
    finally:
        ledger.close()
