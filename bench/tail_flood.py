"""Do one key's live tails slow another tenant? The tail limits under a flood of tails.

A `session-ledger serve` (one worker) in a child process, on SQLite or PostgreSQL. The
quiet tenant writes one message and reads its context window, one pair after another,
`--pairs` times; its pair latencies are measured alone ("unloaded"), while one key of
another tenant writes to a session of its own `--flood-rate` times a second ("its
writes"), and while it also attempts `--tails` live tails of that session ("its writes
and tails": those admitted are held open, so every write wakes each and it reads; the
others are refused with 429). Each store runs two servers: the default limits (16 tails
a key), and `--open-tails` a key (the issue's 300: what open tails cost another tenant
when only their count is unbounded, since a commit wakes only its own tenant's tails).

`python -m bench.tail_flood [--stores sqlite,postgres] [--tails 1000] [--pairs 300]
[--flood-rate 20] [--open-tails 300]` prints a Markdown table and writes
bench/results/tail-flood-latest.json. PostgreSQL: LEDGER_BENCH_POSTGRES_URL (default the
test server), a fresh database of its own.
"""

from __future__ import annotations

import argparse
import statistics
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import httpx

from bench.rate_limits import database, serving
from bench.results import scratch_dir, write_diagnostic
from session_ledger.api.client_requests import session_path


def pairs(base: str, key: str, count: int) -> list[float]:
    """The quiet tenant's write+read latencies (ms), one pair after another."""
    path = session_path("quiet/pairs", "")
    found = []
    with httpx.Client(base_url=base, headers={"Authorization": f"Bearer {key}"}) as http:
        for n in range(count):
            sent = time.perf_counter()
            message = {"messages": [{"role": "user", "content": f"quiet {n}"}]}
            http.post(f"{path}/messages", json=message).raise_for_status()
            http.get(f"{path}/context").raise_for_status()
            found.append((time.perf_counter() - sent) * 1000)
    return found


def flood(
    base: str, key: str, tails: int, rate: float, ready: threading.Event, stop: threading.Event
) -> Counter[int]:
    """`tails` attempted by one key (the admitted held open), then writes to their
    session `rate` times a second until `stop`; the attempts' answers by status."""
    path = session_path("flood/tailed", "")
    statuses: Counter[int] = Counter()
    unbounded = httpx.Limits(max_connections=None, max_keepalive_connections=None)
    auth = {"Authorization": f"Bearer {key}"}
    with (
        ExitStack() as held,
        httpx.Client(base_url=base, headers=auth, timeout=60, limits=unbounded) as http,
    ):
        message = {"messages": [{"role": "user", "content": "flood"}]}
        http.post(f"{path}/messages", json=message).raise_for_status()
        for _ in range(tails):
            answer = held.enter_context(http.stream("GET", f"{path}/events/live"))
            statuses[answer.status_code] += 1
            if answer.status_code != 200:
                answer.close()
        ready.set()
        while not stop.wait(1 / rate):
            http.post(f"{path}/messages", json=message).raise_for_status()
    return statuses


def run_case(
    url: str, limits: dict[str, str], args: argparse.Namespace, work: Path
) -> dict[str, Any]:
    """The quiet tenant's pairs alone, beside the other tenant's writes alone, and beside
    its writes and its tails."""
    found: dict[str, Any] = {"limits": limits}
    with serving(url, limits, work) as (base, quiet_keys, flood_key, _pid):
        pairs(base, quiet_keys[0], 20)  # warm
        found["unloaded"] = summary(pairs(base, quiet_keys[0], args.pairs))
        for phase, tails in (("writes", 0), ("tails", args.tails)):
            ready, stop = threading.Event(), threading.Event()
            with ThreadPoolExecutor(1) as pool:
                flooding = pool.submit(flood, base, flood_key, tails, args.flood_rate, ready, stop)
                ready.wait(600)
                found[phase] = summary(pairs(base, quiet_keys[0], args.pairs))
                stop.set()
                found["attempts"] = dict(flooding.result(60))
    return found


def summary(ms: list[float]) -> dict[str, float]:
    cut = statistics.quantiles(ms, n=100)
    return {"p50": round(statistics.median(ms), 2), "p99": round(cut[98], 2), "n": len(ms)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--tails", type=int, default=1000)
    parser.add_argument("--pairs", type=int, default=300)
    parser.add_argument("--flood-rate", type=float, default=20)
    parser.add_argument("--open-tails", type=int, default=300)
    args = parser.parse_args()
    work = scratch_dir("tail-flood-")
    many = str(args.open_tails)
    cases = {
        "default limits": {},
        f"{many} tails a key": {
            "LEDGER_TAIL_MAX_PER_KEY": many,
            "LEDGER_TAIL_MAX_PER_TENANT": many,
        },
    }
    off = {"LEDGER_RATE_LIMIT_KEY_PER_SECOND": "0", "LEDGER_RATE_LIMIT_TENANT_PER_SECOND": "0"}
    results = []
    print("| store | case | tails admitted / refused | p50 / p99 ms: unloaded | its writes "
          "| its writes and tails | p99 ratio to unloaded |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    for store in args.stores.split(","):
        for name, limits in cases.items():
            with database(store, work) as url:
                found = run_case(url, {**limits, **off}, args, work)
            found |= {"store": store, "case": name}
            results.append(found)
            u, w, t, a = found["unloaded"], found["writes"], found["tails"], found["attempts"]
            print(f"| {store} | {name} | {a.get(200, 0)} / {a.get(429, 0)} | {u['p50']} / "
                  f"{u['p99']} | {w['p50']} / {w['p99']} | {t['p50']} / {t['p99']} | "
                  f"{t['p99'] / u['p99']:.2f}x |")  # fmt: skip
    path = write_diagnostic("tail-flood-latest.json", {"args": vars(args), "results": results})
    print(f"written {path}")


if __name__ == "__main__":
    main()
