"""Streams and live tails: what a streamed delta costs against a plain put, how long a
committed event takes to reach a live tail (one process, and across two on PostgreSQL;
a session's tail and the tenant-wide one), what 1,000 idle tails cost the server in
memory, and what the tenant feed's transaction id column and index cost a PostgreSQL put.

    python -m bench.streams [--deltas 2000] [--events 200] [--tails 1000] [--no-postgres]
                            [--feed-rounds 10] [--feed-puts 200]

Prints a table per part and writes bench/results/streams-latest.json. Delivery delay is
the time from an event's `recorded_at` (taken just before its transaction commits) to the
moment the tail's reader parsed it, both on this host's clock.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import threading
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import psycopg

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings

from .http_api import Server
from .postgres import ScratchDatabases, server_url
from .results import scratch_dir, write_diagnostic

DELTA = "tok "  # about one token of an answer


def chunk_cost(database_url: str, deltas: int) -> dict[str, float]:
    """µs per delta through `Ledger.stream` (default batching, and one event per delta),
    and µs per plain `put` of a message of the same size as one delta."""
    settings = Settings(database_url=database_url, tokenizer="whitespace")
    migrate(settings)
    ledger = open_ledger(settings)
    try:

        def timed(run: Callable[[], None]) -> float:
            start = time.perf_counter()
            run()
            return (time.perf_counter() - start) / deltas * 1e6

        def stream(key: str) -> Callable[[], None]:
            def run() -> None:
                with ledger.stream(key) as s:
                    for _ in range(deltas):
                        s.write(DELTA)

            return run

        def puts() -> None:
            for _ in range(deltas):
                ledger.put("puts", {"role": "assistant", "content": DELTA})

        batched = timed(stream("batched"))
        ledger.stream_flush_bytes = 1  # every delta its own event
        unbatched = timed(stream("unbatched"))
        put = timed(puts)
        events = len(ledger.audit("batched", limit=1000))
    finally:
        ledger.close()
    return {"delta_us_batched": batched, "delta_us_one_event_each": unbatched,
            "put_us": put, "events_of_batched_stream": events}  # fmt: skip


def feed_cost(scratch: ScratchDatabases, rounds: int, puts: int) -> dict[str, float]:
    """µs per put on PostgreSQL with the tenant feed (each event row's transaction id, its
    index) and on a store without them, A/B in alternating turns of `puts` puts (to 50
    sessions) after one warm-up turn each; medians of the turns."""
    urls = {"with": scratch.create("feed_on"), "without": scratch.create("feed_off")}
    ledgers = {}
    for side, url in urls.items():
        settings = Settings(database_url=url, tokenizer="whitespace")
        migrate(settings)
        ledgers[side] = open_ledger(settings)
    with psycopg.connect(urls["without"], autocommit=True) as conn:
        conn.execute("ALTER TABLE ledger_events DROP COLUMN tx")  # and its index
    turns: dict[str, list[float]] = {side: [] for side in ledgers}
    message = {"role": "user", "content": DELTA}
    try:
        for turn in range(rounds + 1):
            order = list(ledgers) if turn % 2 == 0 else list(reversed(ledgers))
            for side in order:
                ledger = ledgers[side]
                start = time.perf_counter()
                for i in range(puts):
                    ledger.put(f"k{i % 50}", message)
                if turn:  # the first turn warms caches and starts the sessions
                    turns[side].append((time.perf_counter() - start) / puts * 1e6)
    finally:
        for ledger in ledgers.values():
            ledger.close()
    with_feed, without = (statistics.median(turns[s]) for s in ("with", "without"))
    return {"put_us_with_feed": with_feed, "put_us_without_feed": without,
            "ratio": with_feed / without, "rounds": rounds, "puts_per_turn": puts}  # fmt: skip


class Tail(threading.Thread):
    """Reads a live tail; records (version, delay in ms) of each event."""

    def __init__(self, base_url: str, key: str, api_key: str, tenant: bool = False) -> None:
        super().__init__(daemon=True)
        self.url = (f"{base_url}/v1/events/live?prefix={quote(key, safe='')}" if tenant
                    else f"{base_url}/v1/sessions/{quote(key, safe='')}/events/live")  # fmt: skip
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.delays: list[float] = []
        self.ready = threading.Event()

    def run(self) -> None:
        with (
            contextlib.suppress(httpx.HTTPError),  # the server stopped: the run is over
            httpx.Client(timeout=None) as client,
            client.stream("GET", self.url, headers=self.headers) as response,
        ):
            self.ready.set()
            for line in response.iter_lines():
                if line.startswith("data: "):
                    at = datetime.fromisoformat(json.loads(line[6:])["recorded_at"])
                    self.delays.append((time.time() - at.timestamp()) * 1000)


def delivery(
    writer: Server, reader: Server, api_key: str, events: int, tenant: bool = False
) -> dict[str, float]:
    """p50 / p99 ms from commit to a tail on `reader` of puts made through `writer`
    (`tenant`: the tenant-wide tail, which starts now: the first put's events are not
    on it)."""
    key = f"tail-{time.monotonic_ns()}"
    before = 0 if tenant else 2
    headers = {"Authorization": f"Bearer {api_key}"}
    path = f"/v1/sessions/{quote(key, safe='')}/messages"
    with httpx.Client(base_url=writer.base_url, headers=headers, timeout=60) as api:
        api.post(path, json={"messages": [{"role": "user", "content": "start"}]})
        tail = Tail(reader.base_url, key, api_key, tenant)
        tail.start()
        tail.ready.wait(30)
        deadline = time.monotonic() + 30
        while len(tail.delays) < before and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)  # the tenant tail's first read is done
        for n in range(events):
            api.post(path, json={"messages": [{"role": "user", "content": f"m{n}"}]})
            time.sleep(0.005)  # one event in flight at a time: delay, not queueing
        while len(tail.delays) < events + before and time.monotonic() < deadline + 60:
            time.sleep(0.05)
    delays = tail.delays[before:]
    cuts = statistics.quantiles(delays, n=100)
    return {"events": len(delays), "p50_ms": cuts[49], "p99_ms": cuts[98]}


def rss_kb(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


async def idle_tails(server: Server, tails: int, tenant: bool = False) -> dict[str, float]:
    """Server RSS growth with `tails` idle tails open (raw sockets: the client stays small);
    `tenant`: tenant-wide tails."""
    with httpx.Client(base_url=server.base_url, timeout=60) as api:
        first = {"messages": [{"role": "user", "content": "x"}]}
        auth = {"Authorization": f"Bearer {server.api_key}"}
        api.post("/v1/sessions/idle/messages", json=first, headers=auth)
    host, port = server.base_url.removeprefix("http://").split(":")
    path, resume = ("/v1/events/live", "") if tenant else ("/v1/sessions/idle/events/live", "2")
    request = (f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer "
               f"{server.api_key}\r\n" + (f"Last-Event-ID: {resume}\r\n" if resume else "")
               + "\r\n").encode()  # fmt: skip
    before = rss_kb(server.process.pid)
    streams = []
    for _ in range(tails):
        reader, writer = await asyncio.open_connection(host, int(port))
        writer.write(request)
        await writer.drain()
        streams.append((reader, writer))
    for reader, _ in streams:  # every tail answered: headers and its first comment
        await reader.readuntil(b": live\n\n")
    await asyncio.sleep(1)
    after = rss_kb(server.process.pid)
    for _, writer in streams:
        writer.close()
    return {"tails": tails, "rss_before_mb": before / 1024, "rss_after_mb": after / 1024,
            "growth_kb_per_tail": (after - before) / tails}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--deltas", type=int, default=2000)
    parser.add_argument("--events", type=int, default=200)
    parser.add_argument("--tails", type=int, default=1000)
    parser.add_argument("--no-postgres", action="store_true")
    parser.add_argument("--feed-rounds", type=int, default=10)
    parser.add_argument("--feed-puts", type=int, default=200)
    args = parser.parse_args()
    work = scratch_dir("bench-streams-")
    results: dict[str, Any] = {"command": vars(args)}
    scratch = ScratchDatabases(server_url())
    postgres = not args.no_postgres and scratch.reachable() is None
    try:
        stores = {"sqlite": f"sqlite:///{work / 'cost.db'}"}
        if postgres:
            stores["postgres"] = scratch.create("stream_cost")
        results["chunk_cost"] = {s: chunk_cost(u, args.deltas) for s, u in stores.items()}
        print("| store | µs per delta, batched | µs per delta, an event each | µs per put |")
        print("|---|---|---|---|")
        for s, c in results["chunk_cost"].items():
            print(f"| {s} | {c['delta_us_batched']:.1f} | {c['delta_us_one_event_each']:.0f} "
                  f"| {c['put_us']:.0f} |")  # fmt: skip

        results["delivery"] = {}
        (work / "a").mkdir()
        sqlite_server = Server(f"sqlite:///{work / 'tail.db'}", work / "a")
        try:
            for tenant in (False, True):
                results["delivery"][f"sqlite, one process{', tenant' * tenant}"] = delivery(
                    sqlite_server, sqlite_server, sqlite_server.api_key, args.events, tenant
                )
            results["idle_tails"] = asyncio.run(idle_tails(sqlite_server, args.tails))
        finally:
            sqlite_server.stop()
        (work / "d").mkdir()  # a fresh process: the first one's freed memory would hide growth
        sqlite_server = Server(f"sqlite:///{work / 'tenant.db'}", work / "d")
        try:
            results["idle_tenant_tails"] = asyncio.run(
                idle_tails(sqlite_server, args.tails, tenant=True)
            )
        finally:
            sqlite_server.stop()
        if postgres:
            url = scratch.create("stream_tail")
            (work / "b").mkdir()
            (work / "c").mkdir()
            first = Server(url, work / "b")
            second = Server(url, work / "c")
            try:
                for label, reader in (("one process", first), ("two processes", second)):
                    for tenant in (False, True):
                        name = f"postgres, {label}{', tenant' * tenant}"
                        results["delivery"][name] = delivery(
                            first, reader, first.api_key, args.events, tenant
                        )
            finally:
                first.stop()
                second.stop()
        print("\n| commit -> tail | events | p50 ms | p99 ms |")
        print("|---|---|---|---|")
        for label, d in results["delivery"].items():
            print(f"| {label} | {d['events']} | {d['p50_ms']:.1f} | {d['p99_ms']:.1f} |")
        for part, kind in (("idle_tails", "session"), ("idle_tenant_tails", "tenant-wide")):
            t = results[part]
            print(f"\n{t['tails']} idle {kind} tails (SQLite server): RSS "
                  f"{t['rss_before_mb']:.1f} -> {t['rss_after_mb']:.1f} MB, "
                  f"{t['growth_kb_per_tail']:.1f} KB per tail")  # fmt: skip
        if postgres:
            f = results["feed_cost"] = feed_cost(scratch, args.feed_rounds, args.feed_puts)
            print(f"\nPostgreSQL put with the tenant feed: {f['put_us_with_feed']:.0f} µs, "
                  f"without: {f['put_us_without_feed']:.0f} µs ({f['ratio']:.3f}x)")  # fmt: skip
    finally:
        scratch.drop_all()
    print(write_diagnostic("streams-latest.json", results))


if __name__ == "__main__":
    main()
