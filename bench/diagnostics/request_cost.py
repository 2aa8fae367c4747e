"""What one request costs in process, and how much of it is FastAPI solving the route's
dependencies (docs/performance.md, "Reads and writes on the event loop").

The app is called as ASGI, without uvicorn or a socket, on a SQLite store (or, with
`--store postgres`, a scratch database on LEDGER_BENCH_POSTGRES_URL's server): GET
`/context` (the 4,000-token window of a 1,000-message session) and POST `/messages` of
one message to one of 4,096 sessions, as `make bench-http` sends them (an `agent` key,
rate limits, quotas and the access log off). Each round runs a batch of each request;
the table gives the median time per request over the rounds and, of that, the time in
`fastapi.routing.solve_dependencies` and in the route itself (timed by wrapping the two,
in this process only). Run it at two revisions in turns to compare them.

`python -m bench.diagnostics.request_cost [--store sqlite|postgres] [--rounds 5] [--batch 1000]
[--workdir DIR]`
prints a Markdown table and writes bench/results/request-cost-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import fastapi.routing

from bench.http_path import CONTEXT_MESSAGES, CONTEXT_SESSION, SESSIONS, TOKEN_LIMIT, _message
from bench.postgres import scratch_database
from bench.results import scratch_dir, write_diagnostic
from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings

OFF = {
    "rate_limit_key_per_second": 0, "rate_limit_tenant_per_second": 0,
    "quota_key_write_bytes_per_day": 0, "quota_tenant_write_bytes_per_day": 0,
    "quota_tenant_sessions": 0, "access_log": False,
}  # fmt: skip
POST_BODY = json.dumps({"messages": [{"role": "user", "content": "x" * 150}]}).encode()


class Timed:
    """Seconds spent in one async function of fastapi.routing, while installed."""

    def __init__(self, name: str) -> None:
        self.name, self.seconds, self.calls = name, 0.0, 0
        self.original: Callable[..., Awaitable[Any]] = getattr(fastapi.routing, name)

    async def __call__(self, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return await self.original(*args, **kwargs)
        finally:
            self.seconds += time.perf_counter() - started
            self.calls += 1

    def install(self) -> None:
        setattr(fastapi.routing, self.name, self)

    def remove(self) -> None:
        setattr(fastapi.routing, self.name, self.original)


def _scope(method: str, path: str, query: bytes, secret: str) -> dict[str, Any]:
    headers = [(b"host", b"ledger"), (b"authorization", f"Bearer {secret}".encode())]
    if method == "POST":
        headers += [(b"content-type", b"application/json"),
                    (b"content-length", str(len(POST_BODY)).encode())]  # fmt: skip
    return {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": query,
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
    }  # fmt: skip


async def _call(app: Any, scope: dict[str, Any], body: bytes) -> None:
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    assert sent[0]["status"] == 200, sent


async def _measure(app: Any, secret: str, rounds: int, batch: int) -> dict[str, Any]:
    get = _scope("GET", f"/v1/sessions/{CONTEXT_SESSION}/context",
                 f"token_limit={TOKEN_LIMIT}".encode(), secret)  # fmt: skip

    def post() -> dict[str, Any]:
        return _scope("POST", f"/v1/sessions/w-{random.randrange(SESSIONS)}/messages", b"",
                      secret)  # fmt: skip

    requests = {
        "GET /context": lambda: _call(app, get, b""),
        "POST /messages": lambda: _call(app, post(), POST_BODY),
    }
    for send in requests.values():  # warm up: imports, caches, the sessions' first writes
        for _ in range(200):
            await send()
    found: dict[str, dict[str, list[float]]] = {
        name: {"total": [], "dependencies": [], "route": []} for name in requests
    }
    for _ in range(rounds):
        for name, send in requests.items():
            parts = [Timed("solve_dependencies"), Timed("run_endpoint_function")]
            for part in parts:
                part.install()
            started = time.perf_counter()
            try:
                for _ in range(batch):
                    await send()
            finally:
                for part in parts:
                    part.remove()
            found[name]["total"].append((time.perf_counter() - started) / batch)
            found[name]["dependencies"].append(parts[0].seconds / batch)
            found[name]["route"].append(parts[1].seconds / batch)
    return {
        name: {part: statistics.median(values) * 1e6 for part, values in parts.items()}
        for name, parts in found.items()
    }


def run(store: str, workdir: Path, rounds: int, batch: int) -> dict[str, Any]:
    if store == "sqlite":
        return measure(f"sqlite:///{workdir / 'ledger.db'}", rounds, batch)
    with scratch_database("request_cost") as url:
        return measure(url, rounds, batch)


def measure(url: str, rounds: int, batch: int) -> dict[str, Any]:
    settings = Settings(database_url=url, auto_migrate=True,
                        token_limit=TOKEN_LIMIT, **OFF)  # fmt: skip
    ledger = open_ledger(settings)
    history = [_message(i) for i in range(CONTEXT_MESSAGES)]
    for i in range(0, CONTEXT_MESSAGES, 100):
        ledger.put_messages(CONTEXT_SESSION, history[i : i + 100])
    keys = MemoryKeyStore()
    _, secret = keys.create(settings.default_tenant, "agent")
    app = create_app(settings, ledger=ledger, key_store=keys)

    async def measured() -> dict[str, Any]:
        async with app.router.lifespan_context(app):
            return await _measure(app, secret, rounds, batch)

    try:
        return asyncio.run(measured())
    finally:
        ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    found = run(args.store, args.workdir or scratch_dir("request-cost-"), args.rounds, args.batch)
    print("| request | per request (µs) | solving dependencies | the route |")
    print("|---|---|---|---|")
    for name, parts in found.items():
        print(f"| {name} | {parts['total']:,.0f} | {parts['dependencies']:,.0f} | "
              f"{parts['route']:,.0f} |")  # fmt: skip
    fields = {"store": args.store, "rounds": args.rounds, "batch": args.batch, "requests": found}
    out = write_diagnostic("request-cost-latest.json", fields)
    print(f"\nwrote {out}")


if __name__ == "__main__":
    main()
