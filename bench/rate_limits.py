"""Does one tenant's flood starve another? Rate limits under a flood, over HTTP.

A `session-ledger serve` (one worker) in a child process, on SQLite or PostgreSQL. The
quiet tenant sends a modest, steady stream (`--quiet-rate` requests a second, one at a
time on a fixed schedule, by 8 keys in turn: alternately a put of one message and a
read of the context window of a 100-message session); its latencies are measured alone
("unloaded") and while a second process floods the server with one key of another
tenant (`--flood-clients` concurrent clients, each putting one message after another
to a session of its own as fast as the server answers, ignoring Retry-After or waiting
it out after each 429). The two alternate, `--rounds` times `--seconds` each. Each store
runs three cases: limits off (every limit 0), and limits on (`--limit` requests a second
per key, burst the same, and ten times that per tenant: a runaway key, while each quiet
key stays far under its limit) with a flood that ignores Retry-After and with one that
honours it. The flood's answers are counted by status.

Also: what the limiter's one statement costs, by calling the store directly
(`LimitStore.take` of a key and a tenant bucket, as a read asks it), and what a request
costs through `Limiter.admit` with the default limits, where most are admitted from the
process's leases.

`python -m bench.rate_limits [--stores sqlite,postgres] [--rounds 3] [--seconds 10]
[--flood-clients 32] [--quiet-rate 20] [--limit 5] [--flood-nice 0] [--lease 0.1]`
(the share of a burst a server process leases, `LEDGER_RATE_LIMIT_LEASE`) prints Markdown
tables and writes bench/results/rate-limits-latest.json. PostgreSQL:
LEDGER_BENCH_POSTGRES_URL (default the test server), a fresh database of its own.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from multiprocessing.synchronize import Event
from pathlib import Path
from typing import Any

import httpx

from bench.postgres import scratch_database
from bench.results import write_diagnostic
from session_ledger.api.auth import Principal
from session_ledger.api.bootstrap import migrate, open_limit_store
from session_ledger.api.client_requests import session_path
from session_ledger.api.ratelimit import Limiter
from session_ledger.api.settings import Settings
from session_ledger.projections.rate_limit_store import Bucket

POSTGRES_URL = os.environ.get("LEDGER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1/test")
CLI = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]
OFF = {
    "LEDGER_RATE_LIMIT_KEY_PER_SECOND": "0", "LEDGER_RATE_LIMIT_TENANT_PER_SECOND": "0",
    "LEDGER_QUOTA_KEY_WRITE_BYTES_PER_DAY": "0", "LEDGER_QUOTA_TENANT_WRITE_BYTES_PER_DAY": "0",
    "LEDGER_QUOTA_TENANT_SESSIONS": "0",
}  # fmt: skip
CONTEXT_MESSAGES = 100
QUIET_KEYS = 8
STATEMENT_CALLS = 2000


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def database(store: str, workdir: Path) -> Iterator[str]:
    if store == "sqlite":
        yield f"sqlite:///{workdir / f'ledger-{uuid.uuid4().hex[:6]}.db'}"
        return
    with scratch_database("limits", POSTGRES_URL) as url:
        yield url


@contextlib.contextmanager
def serving(
    url: str, limits: dict[str, str], workdir: Path
) -> Iterator[tuple[str, list[str], str, int]]:
    """A server on `url`: its base URL, keys of the quiet tenant and one of the flood's,
    and its process id."""
    port = _free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env |= {"LEDGER_DATABASE_URL": url, "LEDGER_PORT": str(port), "LEDGER_ACCESS_LOG": "false",
            "LEDGER_TOKENIZER": "whitespace", **limits}  # fmt: skip
    subprocess.run([*CLI, "migrate"], env=env, check=True, capture_output=True)

    def key(tenant: str) -> str:
        done = subprocess.run([*CLI, "keys", "create", "--tenant", tenant], env=env,
                              check=True, capture_output=True, text=True)  # fmt: skip
        return done.stdout.split("key: ")[1].split()[0]

    with ThreadPoolExecutor(4) as pool:
        keys = list(pool.map(key, ["flood"] + ["quiet"] * QUIET_KEYS))
    with (workdir / "server.log").open("a") as log:
        server = subprocess.Popen([*CLI, "serve"], env=env, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(f"{base}/readyz", timeout=1).status_code == 200:
                    break
            time.sleep(0.1)
        yield base, keys[1:], keys[0], server.pid
    finally:
        server.terminate()
        server.wait(timeout=30)


def quiet(base: str, keys: list[str], seconds: float, rate: float) -> list[float]:
    """The quiet tenant's latencies (ms): a put or a read every 1/rate s, one at a time,
    by its keys in turn (each stays far under the per-key limit)."""
    message = {"messages": [{"role": "user", "content": "a quiet tenant's message"}]}
    history = {"messages": [{"role": "user", "content": f"message {n}"}
                            for n in range(CONTEXT_MESSAGES)]}  # fmt: skip
    latencies = []
    with httpx.Client(base_url=base) as http:
        auth = [{"Authorization": f"Bearer {key}"} for key in keys]
        context = session_path("quiet/context", "/messages")
        http.put(context, json=history, headers=auth[0]).raise_for_status()
        start = time.perf_counter()
        for n in range(int(seconds * rate)):
            delay = start + n / rate - time.perf_counter()
            if delay > 0:
                time.sleep(delay)
            else:  # late after a slow answer: go on from now, never faster than the rate
                start -= delay
            sent = time.perf_counter()
            who = auth[n % len(auth)]
            if n % 2:
                answer = http.get(session_path("quiet/context", "/context"),
                                  params={"token_limit": 200}, headers=who)  # fmt: skip
            else:
                answer = http.post(session_path("quiet/writes", "/messages"), json=message,
                                   headers=who)  # fmt: skip
            latencies.append((time.perf_counter() - sent) * 1000)
            if answer.status_code >= 400:
                raise RuntimeError(f"the quiet tenant got {answer.status_code}: {answer.text}")
    return latencies


def flood(
    base: str, key: str, clients: int, honour: bool, niceness: int, stop: Event, counts: Any
) -> None:
    """The flooding tenant, in a process of its own: `clients` loops putting as fast as the
    server answers (after a 429 waiting its Retry-After if `honour`), until `stop`; the
    answers by status go to `counts`."""
    # In production a flood comes from other machines; here its clients share the
    # server's cores (`--flood-nice` lowers their claim on them).
    os.nice(niceness)

    async def main() -> Counter[int]:
        seen: Counter[int] = Counter()
        limits = httpx.Limits(max_connections=clients)
        headers = {"Authorization": f"Bearer {key}"}
        async with httpx.AsyncClient(
            base_url=base, limits=limits, timeout=60, headers=headers
        ) as http:

            async def client(n: int) -> None:
                body = {"messages": [{"role": "user", "content": f"flood {n}"}]}
                while not stop.is_set():
                    try:
                        answer = await http.post(session_path(f"flood/{n}", "/messages"),
                                                 json=body)  # fmt: skip
                    except httpx.TransportError:  # a connection the server closed: go on
                        seen[0] += 1
                        continue
                    seen[answer.status_code] += 1
                    if honour and answer.status_code == 429:
                        await asyncio.sleep(float(answer.headers["Retry-After"]))

            await asyncio.gather(*(client(n) for n in range(clients)))
        return seen

    counts.update({str(status): n for status, n in asyncio.run(main()).items()})
    counts["cpu_seconds"] = time.process_time()


def percentiles(latencies: list[float]) -> dict[str, float]:
    ordered = sorted(latencies)
    return {"p50_ms": statistics.median(ordered),
            "p99_ms": ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))],
            "requests": len(ordered)}  # fmt: skip


def run_case(
    url: str, limits: dict[str, str], honour: bool, args: argparse.Namespace, workdir: Path
) -> dict[str, Any]:
    """Rounds of the quiet tenant alone, then flooded: the two are measured minutes apart
    at most, on a machine whose speed drifts."""
    alone: list[float] = []
    loaded: list[float] = []
    answers: Counter[int] = Counter()
    flooding = 0.0
    cpu = {"server alone": 0.0, "server flooded": 0.0, "flood": 0.0}
    alone_s = loaded_s = 0.0
    with serving(url, limits, workdir) as (base, quiet_keys, flood_key, pid):
        quiet(base, quiet_keys, 2, args.quiet_rate)  # warm-up, not kept
        for _ in range(args.rounds):
            began, used = time.perf_counter(), cpu_seconds(pid)
            alone += quiet(base, quiet_keys, args.seconds, args.quiet_rate)
            cpu["server alone"] += cpu_seconds(pid) - used
            alone_s += time.perf_counter() - began
            with multiprocessing.Manager() as manager:
                counts, stop = manager.dict(), multiprocessing.Event()
                flooder = multiprocessing.Process(target=flood, args=(
                    base, flood_key, args.flood_clients, honour, args.flood_nice, stop, counts,
                ))  # fmt: skip
                started = time.perf_counter()
                flooder.start()
                time.sleep(2)  # the flood reaches its pace
                began, used = time.perf_counter(), cpu_seconds(pid)
                loaded += quiet(base, quiet_keys, args.seconds, args.quiet_rate)
                stop.set()
                flooder.join()
                cpu["server flooded"] += cpu_seconds(pid) - used
                loaded_s += time.perf_counter() - began
                flooding += time.perf_counter() - started
                cpu["flood"] += counts.pop("cpu_seconds")
                answers.update({int(k): v for k, v in counts.items()})
    unloaded, flooded = percentiles(alone), percentiles(loaded)
    return {
        "unloaded": unloaded, "flooded": flooded,
        "p99_ratio": flooded["p99_ms"] / unloaded["p99_ms"],
        "flood_answers": dict(answers), "flood_requests_per_s": sum(answers.values()) / flooding,
        # CPU seconds a second (1.0: one core busy); the machine has os.cpu_count() cores.
        "server_cpu_alone": cpu["server alone"] / alone_s,
        "server_cpu_flooded": cpu["server flooded"] / loaded_s,
        "flood_cpu": cpu["flood"] / flooding, "load_average": os.getloadavg(),
    }  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User and system CPU seconds process `pid` has used (Linux /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def statement_cost(url: str) -> dict[str, float]:
    """Microseconds of one `take` of a key and a tenant bucket, admitted and refused, in
    a store `migrate` made (on SQLite: the ledger's file, in WAL mode)."""
    migrate(Settings(database_url=url))
    store = open_limit_store(url)
    try:
        found = {}
        for verdict, per_second in (("admitted", 1e9), ("refused", 1e-9)):
            step = 1 / per_second
            buckets = [Bucket(f"requests:{owner}:{verdict}", step, step)
                       for owner in ("key", "tenant")]  # fmt: skip
            store.take(buckets, time.time())
            began = time.perf_counter()
            for _ in range(STATEMENT_CALLS):
                store.take(buckets, time.time())
            found[f"{verdict}_us"] = (time.perf_counter() - began) / STATEMENT_CALLS * 1e6
        # A request as the limiter admits it, with the default limits and leases.
        limiter = Limiter(Settings(database_url=url), store)
        principal = Principal(key_id="bench", tenant="bench", role="agent")
        began = time.perf_counter()
        for _ in range(STATEMENT_CALLS):
            limiter.admit(principal, 0)
        found["admit_us"] = (time.perf_counter() - began) / STATEMENT_CALLS * 1e6
        return found
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--flood-clients", type=int, default=32)
    parser.add_argument("--quiet-rate", type=float, default=20.0)
    parser.add_argument("--limit", type=float, default=5.0)
    parser.add_argument("--flood-nice", type=int, default=0)
    parser.add_argument("--lease", type=float, default=Settings().rate_limit_lease)
    args = parser.parse_args()
    on = {**OFF, "LEDGER_RATE_LIMIT_KEY_PER_SECOND": str(args.limit),
          "LEDGER_RATE_LIMIT_KEY_BURST": str(int(args.limit)),
          "LEDGER_RATE_LIMIT_TENANT_PER_SECOND": str(10 * args.limit),
          "LEDGER_RATE_LIMIT_TENANT_BURST": str(int(10 * args.limit)),
          "LEDGER_RATE_LIMIT_LEASE": str(args.lease)}  # fmt: skip
    cases: dict[str, Any] = {}
    costs: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as scratch:
        workdir = Path(scratch)
        for store in args.stores.split(","):
            for mode, limits, honour in (
                ("limits off, flood ignores Retry-After", OFF, False),
                ("limits on, flood ignores Retry-After", on, False),
                ("limits on, flood honours Retry-After", on, True),
            ):
                with database(store, workdir) as url:
                    case = cases[f"{store}, {mode}"] = run_case(url, limits, honour, args, workdir)
                    print(f"{store}, {mode}: {case}", file=sys.stderr)
            with database(store, workdir) as url:
                costs[store] = statement_cost(url)
    table = tables(cases, costs)
    print(table)
    path = write_diagnostic("rate-limits-latest.json", {
        "command": "python -m bench.rate_limits " + " ".join(sys.argv[1:]),
        "settings": vars(args), "load_average": os.getloadavg(), "cpus": os.cpu_count(),
        "cases": cases, "statement_cost": costs, "table_markdown": table,
    })  # fmt: skip
    print(f"\nwritten: {path}")


def tables(cases: dict[str, Any], costs: dict[str, Any]) -> str:
    lines = [
        "| store, case | quiet p50 ms unloaded | quiet p99 ms unloaded | quiet p50 ms flooded "
        "| quiet p99 ms flooded | p99 flooded / unloaded | flood req/s | flood 200 | flood 429 "
        "| flood other | server CPU alone / flooded | flood CPU |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name, case in cases.items():
        alone, loaded, answers = case["unloaded"], case["flooded"], case["flood_answers"]
        other = sum(n for status, n in answers.items() if status not in (200, 429))
        lines.append(
            f"| {name} | {alone['p50_ms']:.2f} | {alone['p99_ms']:.2f} | {loaded['p50_ms']:.2f} "
            f"| {loaded['p99_ms']:.2f} | {case['p99_ratio']:.2f}x "
            f"| {case['flood_requests_per_s']:.0f} | {answers.get(200, 0)} "
            f"| {answers.get(429, 0)} | {other} "
            f"| {case['server_cpu_alone']:.2f} / {case['server_cpu_flooded']:.2f} "
            f"| {case['flood_cpu']:.2f} |"
        )
    lines += ["", "| store | limiter statement, admitted µs | refused µs "
              "| a request admitted by the limiter (leases) µs |", "|---|---|---|---|"]  # fmt: skip
    lines += [f"| {s} | {c['admitted_us']:.0f} | {c['refused_us']:.0f} | {c['admit_us']:.1f} |"
              for s, c in costs.items()]  # fmt: skip
    return "\n".join(lines)


if __name__ == "__main__":
    main()
