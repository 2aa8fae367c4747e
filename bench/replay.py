"""Replay benchmark: the state of a session at a random past version, as sessions grow.

For sessions of 1,000 / 10,000 / 100,000 events (one message appended per event) on
SQLite and PostgreSQL, times three ways to answer "what was the state at version v":
- window@v: `get(key, token_limit=4000, as_of_version=v)`, the context the model saw
  then, from the temporal transcript (what the ratio target is about);
- history@v: `get_all(key, as_of_version=v)`, the whole history then; it returns about
  v/2 messages on average, so it grows with the session by nature;
- replay@v: folding the stored events up to v (tests/reference_replay.py, as an event
  store without temporal views would answer).

Prints a Markdown table (medians) with the ratio of the largest session to the
smallest, and writes JSON to bench/results/replay-<time>.json and replay-latest.json.
`python -m bench.replay [--sizes 1000,10000,100000] [--reads 30]`
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

from bench.corpus import conversation
from bench.postgres import ScratchDatabases, server_url
from bench.results import RESULTS, revision
from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id
from tests.reference_replay import replay

TOKEN_LIMIT = 4000
WAYS = ("window@v", "history@v", "replay@v")


def grow(ledger: Ledger, key: str, events: int, corpus: list[dict[str, Any]]) -> None:
    """A session of `events` events: SessionStarted, then one message per write."""
    for i in range(events - 1):
        ledger.put(key, corpus[i % len(corpus)])


def timed(call: Callable[[int], object], reads: int, rng: random.Random, head: int) -> float:
    """Median milliseconds of `call` over `reads` random past versions."""
    times = []
    for _ in range(reads):
        version = rng.randint(2, head)
        start = time.perf_counter()
        call(version)
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def measure(ledger: Ledger, key: str, head: int, reads: int) -> dict[str, float]:
    rng = random.Random(head)
    sid = session_id(ledger.default_tenant, key)
    ways: dict[str, Callable[[int], object]] = {
        "window@v": lambda v: ledger.get(key, token_limit=TOKEN_LIMIT, as_of_version=v),
        "history@v": lambda v: ledger.get_all(key, as_of_version=v),
        "replay@v": lambda v: replay(ledger.events.get(sid, lte=v), v).messages,
    }
    return {way: timed(call, reads, rng, head) for way, call in ways.items()}


def run(sizes: list[int], reads: int) -> dict[str, Any]:
    corpus = conversation(2000)
    scratch = ScratchDatabases(server_url())
    cells: dict[str, dict[int, dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="ledger-replay-") as work:
        stores = {"sqlite": f"sqlite:///{work}/ledger.db"}
        if scratch.reachable() is None:
            stores["postgres"] = scratch.create("replay")
        try:
            for name, url in stores.items():
                settings = Settings(database_url=url)
                migrate(settings)
                ledger = open_ledger(settings)
                try:
                    for size in sizes:
                        key = f"replay-{size}"
                        grow(ledger, key, size, corpus)
                        cells.setdefault(name, {})[size] = measure(ledger, key, size, reads)
                        print(f"{name} {size:,} events: {cells[name][size]}", flush=True)
                finally:
                    ledger.close()
        finally:
            scratch.drop_all()
    return cells


def table(cells: dict[str, dict[int, dict[str, float]]], sizes: list[int]) -> str:
    head = "| store | read | " + " | ".join(f"{s:,} events ms" for s in sizes)
    lines = [head + " | largest / smallest |", "|" + "---|" * (len(sizes) + 3)]
    for store, by_size in cells.items():
        for way in WAYS:
            values = [by_size[s][way] for s in sizes]
            ratio = values[-1] / values[0]
            mark = (" (target <= 3: PASS)" if ratio <= 3 else " (target <= 3: FAIL)") * (
                way == "window@v"
            )
            cols = " | ".join(f"{v:.3g}" for v in values)
            lines.append(f"| {store} | {way} | {cols} | {ratio:.2f}x{mark} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--reads", type=int, default=30)
    args = parser.parse_args()
    sizes = [int(s) for s in args.sizes.split(",")]
    started = time.time()
    cells = run(sizes, args.reads)
    markdown = table(cells, sizes)
    print(markdown)
    record = {
        "command": "python -m bench.replay " + f"--sizes {args.sizes} --reads {args.reads}",
        "revision": revision(),
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "cells": {s: {str(n): v for n, v in by.items()} for s, by in cells.items()},
        "table_markdown": markdown,
    }
    RESULTS.mkdir(exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    for name in (f"replay-{stamp}.json", "replay-latest.json"):
        (RESULTS / name).write_text(json.dumps(record, indent=1), encoding="utf-8")


if __name__ == "__main__":
    main()
