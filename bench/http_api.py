"""W6: session-ledger over HTTP, `session-ledger serve` (one uvicorn worker) in a child
process, driven by the project's own async client at concurrency 1 and 16.

Writes go to one session per concurrent caller (callers of one session would only
measure its retries); reads ask every time for the 4,000-token context window of
one session of 1,000 messages.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import httpx

from .corpus import TOKEN_LIMIT, Message
from .workloads import Cell

CONCURRENCY = (1, 16)
CONTEXT_SESSION = "w6-context"
CONTEXT_MESSAGES = 1000
STARTUP_SECONDS = 60
MAX_TAILS = 100_000  # the servers' tail limits: none that a bench reaches


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Server:
    """A running `session-ledger serve` on `database_url`, with an admin key of its own."""

    def __init__(self, database_url: str, workdir: Path, master_key: str | None = None) -> None:
        self.api_key = secrets.token_urlsafe(24)
        port = _free_port()
        self.base_url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "LEDGER_DATABASE_URL": database_url,
            "LEDGER_HOST": "127.0.0.1",
            "LEDGER_PORT": str(port),
            "LEDGER_WORKERS": "1",
            "LEDGER_BOOTSTRAP_KEY": self.api_key,
            "LEDGER_TOKEN_LIMIT": str(TOKEN_LIMIT),
            # What is measured is the request path, not the limiter: its defaults (1,000
            # requests a second per key) refused a concurrency-16 cell with 429s.
            "LEDGER_RATE_LIMIT_KEY_PER_SECOND": "0",
            "LEDGER_RATE_LIMIT_TENANT_PER_SECOND": "0",
            # bench.streams measures what 1,000 idle tails of one key cost the server.
            "LEDGER_TAIL_MAX_PER_KEY": str(MAX_TAILS),
            "LEDGER_TAIL_MAX_PER_TENANT": str(MAX_TAILS),
        }
        if master_key is not None:  # encryption at rest: every session sealed
            env["LEDGER_MASTER_KEY"] = master_key
        self.log = (workdir / "server.log").open("w")
        command = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]
        self.process = subprocess.Popen(
            [*command, "serve"], env=env, stdout=self.log, stderr=subprocess.STDOUT
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}; see its log")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{self.base_url}/readyz", timeout=1).status_code == 200:
                    return
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not become ready within {STARTUP_SECONDS} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


@contextlib.contextmanager
def serving(
    database_url: str, workdir: Path, history: list[Message], master_key: str | None = None
) -> Iterator[Server]:
    """A server whose context session already holds `history`."""
    from session_ledger.api.client import LedgerClient

    server = Server(database_url, workdir, master_key)
    try:
        with LedgerClient(server.base_url, server.api_key) as client:
            client.put_messages(CONTEXT_SESSION, history[:CONTEXT_MESSAGES])
        yield server
    finally:
        server.stop()


async def _drive(
    server: Server,
    requests: int,
    concurrency: int,
    call: Callable[[Any, int], Awaitable[object]],
    budget_s: float,
) -> Cell:
    from session_ledger.api.client_async import AsyncLedgerClient

    latencies: list[float] = []
    pending = iter(range(requests))
    deadline = time.perf_counter() + budget_s

    async def caller(client: Any, index: int) -> None:
        for _ in pending:
            t0 = time.perf_counter()
            await call(client, index)
            latencies.append(time.perf_counter() - t0)
            if t0 > deadline:
                return

    async with AsyncLedgerClient(server.base_url, server.api_key) as client:
        start = time.perf_counter()
        await asyncio.gather(*(caller(client, i) for i in range(concurrency)))
        elapsed = time.perf_counter() - start
    ordered = sorted(latencies)
    note = "" if len(ordered) == requests else f"stopped at {len(ordered)}/{requests}"
    return Cell(
        "req/s",
        value=len(ordered) / elapsed,
        note=note,
        extra={
            "p50_ms": statistics.median(ordered) * 1000,
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1000,
            "requests": len(ordered),
        },
    )


def measure(
    server: Server, rep: int, messages: list[Message], requests: int, budget_s: float
) -> dict[str, Cell]:
    """The W6 cells of one repetition: put and get, each at every concurrency."""
    cells: dict[str, Cell] = {}
    for concurrency in CONCURRENCY:
        sent = itertools.count()

        async def put(
            client: Any, index: int, c: int = concurrency, n: Iterator[int] = sent
        ) -> object:
            message = messages[next(n) % len(messages)]
            return await client.put(f"w6-{rep}-c{c}-{index}", message)

        async def get(client: Any, index: int) -> object:
            return await client.get(CONTEXT_SESSION, token_limit=TOKEN_LIMIT)

        for name, call in (("put", put), ("get", get)):
            cells[f"W6 {name} c{concurrency}"] = asyncio.run(
                _drive(server, requests, concurrency, call, budget_s)
            )
    return cells
