"""What the operations signals add to one request, measured in process, A/B in turns.

Sides, each the same app over one in-memory store, answering the same requests:
  bare     without the request-id middleware and with the ledger's observer silent
           (the request path before the operations work, but for the HTTP metrics
           middleware, which was there already);
  signals  as shipped with tracing off: request ids, and the ledger's events, retries
           and store-call times on /metrics;
  traced   as shipped with tracing on (an in-memory exporter, emptied between turns).
Each turn runs a batch of every side in turn (starting with the next side each
turn), so load on the machine falls on all sides alike; times are this process's CPU
time (all its threads), which other processes' load disturbs less than wall time. The
table gives each side's median per request over the turns and its difference from
`bare`. Then the parts alone, in turns too: the request-id and tracing middlewares
around an endpoint that answers at once, the observer around an empty store call, and
one access line formatted as JSON against uvicorn's plain access formatter.

`python -m bench.diagnostics.middleware_cost [--turns 15] [--batch 200]` prints a
Markdown table and writes bench/results/middleware-cost-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import time
from collections.abc import Callable
from typing import Any

import httpx
from fastapi import FastAPI
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from uvicorn.logging import AccessFormatter

from bench.results import write_diagnostic
from session_ledger.api.app import create_app
from session_ledger.api.app_observer import AppObserver
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.logs import JsonLines, RequestIds
from session_ledger.api.metrics import Metrics
from session_ledger.api.tracing import TracingMiddleware
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.observer import SILENT

SESSION = "bench%2Fmiddleware"  # percent-encoded, as a path segment
MESSAGE = {"messages": [{"role": "user", "content": "one two three four five"}]}


class Side:
    def __init__(self, name: str, app: FastAPI, ledger: Ledger, secret: str) -> None:
        self.name, self.app, self.ledger = name, app, ledger
        self.client = httpx.AsyncClient(
            transport=httpx.ASGITransport(app=app), base_url="http://ledger",
            headers={"Authorization": f"Bearer {secret}"},
        )  # fmt: skip
        self.per_request: dict[str, list[float]] = {"put": [], "get": []}

    async def batch(self, n: int) -> None:
        for kind, call in (("put", self.put), ("get", self.get)):
            started = time.process_time()
            for _ in range(n):
                answer = await call()
                assert answer.status_code == 200, answer.text
            self.per_request[kind].append((time.process_time() - started) / n)

    def put(self) -> Any:
        return self.client.post(f"/v1/sessions/{SESSION}/messages", json=MESSAGE)

    def get(self) -> Any:
        return self.client.get(f"/v1/sessions/{SESSION}/context?token_limit=200")


def make_side(name: str) -> tuple[Side, Callable[[], None]]:
    from session_ledger.api.settings import Settings

    settings = Settings(database_url="memory://", tokenizer="whitespace",
                        rate_limit_key_per_second=0, rate_limit_tenant_per_second=0)  # fmt: skip
    ledger = open_ledger(settings)
    store = MemoryKeyStore()
    _, secret = store.create("bench", "admin")
    exporter = InMemorySpanExporter()
    provider = None
    if name == "traced":
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    app = create_app(settings, ledger=ledger, key_store=store, tracer_provider=provider)
    if name == "bare":
        app.user_middleware = [m for m in app.user_middleware if m.cls is not RequestIds]
        ledger.observer = SILENT
    return Side(name, app, ledger, secret), exporter.clear


async def answer_at_once(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


async def receive_nothing() -> dict[str, Any]:
    return {"type": "http.request", "body": b""}


async def send_nowhere(message: Any) -> None:
    return None


def parts_us(turns: int, n: int = 5_000) -> dict[str, float]:
    """CPU µs each part adds to one call, median over turns taken in turn with the bare
    endpoint."""
    provider = TracerProvider()
    exporter = InMemorySpanExporter()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    metrics = Metrics()
    scope = {"type": "http", "method": "GET", "path": "/x", "raw_path": b"/x",
             "headers": [(b"x-request-id", b"bench-1"), (b"host", b"ledger")]}  # fmt: skip

    async def asgi(app: Any) -> None:
        for _ in range(n):
            await app(dict(scope), receive_nothing, send_nowhere)

    def observed(observer: Any) -> Any:
        async def calls() -> None:
            for _ in range(n):
                with observer.store_call("write"):
                    pass
                observer.events_written(["MessagesAppended"])

        return calls()

    runs: dict[str, Callable[[], Any]] = {
        "endpoint": lambda: asgi(answer_at_once),
        "request ids": lambda: asgi(RequestIds(answer_at_once)),
        "tracing": lambda: asgi(TracingMiddleware(answer_at_once, tracer)),
        "silent observer": lambda: observed(SILENT),
        "metrics observer": lambda: observed(AppObserver(metrics)),
        "traced observer": lambda: observed(AppObserver(metrics, tracer)),
    }
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(turns):
        for name, run_part in runs.items():
            started = time.process_time()
            asyncio.run(run_part())
            times[name].append((time.process_time() - started) / n * 1e6)
            exporter.clear()
    median = {name: statistics.median(t) for name, t in times.items()}
    return {
        "request ids": round(median["request ids"] - median["endpoint"], 2),
        "tracing middleware": round(median["tracing"] - median["endpoint"], 2),
        "observer (metrics)": round(median["metrics observer"] - median["silent observer"], 2),
        "observer (metrics + span)": round(
            median["traced observer"] - median["silent observer"], 2
        ),
    }


def access_line_us(formatter: logging.Formatter, n: int = 20_000) -> float:
    record = logging.LogRecord("uvicorn.access", logging.INFO, __file__, 0,
                               '%s - "%s %s HTTP/%s" %d',
                               ("127.0.0.1:5000", "GET", "/v1/sessions/a/context", "1.1", 200),
                               None)  # fmt: skip
    started = time.process_time()
    for _ in range(n):
        formatter.format(record)
    return (time.process_time() - started) / n * 1e6


async def run(turns: int, batch: int) -> dict[str, Any]:
    made = [make_side(name) for name in ("bare", "signals", "traced")]
    sides = [side for side, _ in made]
    for side in sides:  # warm: the first requests build the middleware stack, caches
        await side.batch(20)
        side.per_request = {"put": [], "get": []}
    for turn in range(turns):
        # Each turn starts with the next side, so no side always follows the same one.
        for side, clear in made[turn % 3 :] + made[: turn % 3]:
            await side.batch(batch)
            clear()
    for side in sides:
        await side.client.aclose()
        side.ledger.close()
    result: dict[str, Any] = {}
    for kind in ("put", "get"):
        base = statistics.median(sides[0].per_request[kind])
        for side in sides:
            us = statistics.median(side.per_request[kind]) * 1e6
            result[f"{kind}:{side.name}"] = {"us": round(us, 1),
                                             "added_us": round(us - base * 1e6, 1)}  # fmt: skip
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--turns", type=int, default=15)
    parser.add_argument("--batch", type=int, default=200)
    args = parser.parse_args()
    requests = asyncio.run(run(args.turns, args.batch))
    parts = parts_us(args.turns)
    plain = access_line_us(AccessFormatter('%(client_addr)s - "%(request_line)s" %(status_code)s'))
    json_line = access_line_us(JsonLines())
    print(f"| request | side | CPU µs per request (median of {args.turns} turns) | added |")
    print("|---|---|---|---|")
    for name, figures in requests.items():
        kind, side = name.split(":")
        print(f"| {kind} | {side} | {figures['us']} | {figures['added_us']:+} |")
    print("\n| part | CPU µs added per call |\n|---|---|")
    for name, us in parts.items():
        print(f"| {name} | {us:+} |")
    print(f"\naccess line: plain {plain:.1f} µs, JSON {json_line:.1f} µs")
    path = write_diagnostic("middleware-cost-latest.json", {
        "turns": args.turns, "batch": args.batch, "requests": requests, "parts_us": parts,
        "access_line_us": {"plain": round(plain, 2), "json": round(json_line, 2)},
    })  # fmt: skip
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
