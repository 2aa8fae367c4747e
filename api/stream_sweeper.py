"""The server's sweep of streams left open: every open stream with no event for
`stream_timeout_seconds` is aborted (cause "timeout"), whoever left it: a client that went
away, or a process that died mid-stream (the first sweep runs at start-up, so a restart
recovers them). Every API process sweeps; an abort another process made first is skipped."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.ledger import Ledger

log = logging.getLogger("session_ledger.api")


async def sweep_forever(ledger: Ledger, timeout_seconds: float) -> None:
    # A quarter of the timeout between sweeps: a stream is aborted at most 1.25 times
    # its timeout after its last event.
    pause = max(timeout_seconds / 4, 0.05)
    while True:
        try:
            aborted = await asyncio.to_thread(ledger.abort_idle_streams, timeout_seconds)
            if aborted:
                log.info("aborted %d stream(s) idle for %g s", aborted, timeout_seconds)
        except (LedgerError, OSError) as e:  # the store is away: try again next time
            log.warning("stream sweep failed: %s", e)
        await asyncio.sleep(pause)


@asynccontextmanager
async def sweeping(ledger: Ledger, timeout_seconds: float) -> AsyncIterator[None]:
    task = asyncio.create_task(sweep_forever(ledger, timeout_seconds))
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task
