"""What a read costs through `session-ledger mcp` beside the HTTP API it mirrors.

The 4,000-token context window of a 1,000-message session (W6's session), read one
call after another: through the HTTP API (`GET /v1/sessions/{key}/context` by the
project's client, from a `session-ledger serve`), through `session-ledger mcp` over
stdio and over streamable HTTP (the `mcp` SDK's `ClientSession` calling the
`context_window` tool), on SQLite and PostgreSQL. The key is an admin's, so every read,
by either path, also appends its access-log entry. Prints a Markdown table (reads/s,
p50, p99) and writes bench/results/mcp-reads-latest.json.

`python -m bench.mcp_reads [--reads 300] [--stores sqlite,postgres]`
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

from session_ledger.api.client_async import AsyncLedgerClient

from .corpus import TOKEN_LIMIT, conversation
from .http_api import CONTEXT_MESSAGES, CONTEXT_SESSION, STARTUP_SECONDS, _free_port, serving
from .postgres import scratch_database
from .results import scratch_dir, write_diagnostic

COMMAND = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]


def _env(database_url: str, api_key: str) -> dict[str, str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    return {**clean, "LEDGER_DATABASE_URL": database_url, "LEDGER_API_KEY": api_key,
            "LEDGER_TOKEN_LIMIT": str(TOKEN_LIMIT)}  # fmt: skip


@contextlib.asynccontextmanager
async def _stdio(env: dict[str, str], workdir: Path) -> AsyncIterator[ClientSession]:
    server = StdioServerParameters(command=COMMAND[0], args=[*COMMAND[1:], "mcp"], env=env)
    with (workdir / "mcp-stdio.log").open("w") as log:
        async with stdio_client(server, errlog=log) as streams, ClientSession(*streams) as s:
            await s.initialize()
            yield s


@contextlib.asynccontextmanager
async def _http(env: dict[str, str], workdir: Path) -> AsyncIterator[ClientSession]:
    port = _free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with (workdir / "mcp-http.log").open("w") as log:
        process = subprocess.Popen([*COMMAND, "mcp", "--transport", "http", "--port", str(port)],
                                   env=env, stdout=log, stderr=subprocess.STDOUT)  # fmt: skip
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while True:
                with contextlib.suppress(httpx.TransportError):
                    httpx.post(url, timeout=1)
                    break
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("session-ledger mcp did not listen; see its log")
                await asyncio.sleep(0.1)
            headers = {"Authorization": f"Bearer {env['LEDGER_API_KEY']}"}
            async with (
                httpx2.AsyncClient(headers=headers, timeout=60) as client,
                streamable_http_client(url, http_client=client) as streams,
                ClientSession(*streams) as session,
            ):
                await session.initialize()
                yield session
        finally:
            process.terminate()
            process.wait(timeout=20)


async def _timed(read: Callable[[], Awaitable[int]], reads: int) -> dict[str, Any]:
    """`reads` calls of `read` (which returns the window's message count), one after
    another, after 10 to warm up."""
    for _ in range(10):
        await read()
    times, sizes = [], set()
    for _ in range(reads):
        start = time.perf_counter()
        sizes.add(await read())
        times.append(time.perf_counter() - start)
    assert len(sizes) == 1, "every read answers the same window"
    quantiles = statistics.quantiles(times, n=100)
    return {"reads_per_s": reads / sum(times), "p50_ms": statistics.median(times) * 1000,
            "p99_ms": quantiles[98] * 1000, "messages": sizes.pop()}  # fmt: skip


async def _measure(database_url: str, workdir: Path, reads: int) -> dict[str, dict[str, Any]]:
    cells: dict[str, dict[str, Any]] = {}
    with serving(database_url, workdir, conversation(CONTEXT_MESSAGES)) as server:
        env = _env(database_url, server.api_key)
        async with AsyncLedgerClient(server.base_url, server.api_key) as client:

            async def over_http() -> int:
                return len(await client.get(CONTEXT_SESSION, token_limit=TOKEN_LIMIT))

            cells["HTTP API"] = await _timed(over_http, reads)
        for name, opened in (("MCP stdio", _stdio), ("MCP streamable HTTP", _http)):
            async with opened(env, workdir) as session:

                async def over_mcp(session: ClientSession = session) -> int:
                    result = await session.call_tool("context_window", {
                        "session_key": CONTEXT_SESSION, "token_limit": TOKEN_LIMIT})  # fmt: skip
                    assert not result.is_error and result.structured_content, result.content
                    return len(result.structured_content["messages"])

                cells[name] = await _timed(over_mcp, reads)
    return cells


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=300)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args()
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for store in args.stores.split(","):
        workdir = scratch_dir(f"mcp-{store}-")
        with contextlib.ExitStack() as stack:
            if store == "sqlite":
                url = f"sqlite:///{(workdir / 'ledger.db').resolve()}"
            else:
                url = stack.enter_context(scratch_database("mcp"))
            results[store] = asyncio.run(_measure(url, workdir, args.reads))
    print(f"\ncontext window of {TOKEN_LIMIT} tokens, {CONTEXT_MESSAGES}-message session, "
          f"{args.reads} reads one after another\n")  # fmt: skip
    print("| store | path | reads/s | p50 ms | p99 ms | messages |")
    print("|---|---|---:|---:|---:|---:|")
    for store, cells in results.items():
        for path, cell in cells.items():
            print(f"| {store} | {path} | {cell['reads_per_s']:.0f} | {cell['p50_ms']:.2f} | "
                  f"{cell['p99_ms']:.2f} | {cell['messages']} |")  # fmt: skip
    written = write_diagnostic("mcp-reads-latest.json", {
        "command": " ".join(sys.argv), "reads": args.reads, "token_limit": TOKEN_LIMIT,
        "session_messages": CONTEXT_MESSAGES, "results": results,
    })  # fmt: skip
    print(f"\nwritten: {written}")


if __name__ == "__main__":
    main()
