"""The scale run: a large store against a small one, on partitioned PostgreSQL.

    python -m bench.scale [--events 10000000] [--baseline 100000] [--partitions 16]
                          [--workers N] [--database-prefix P] [--keep]

Loads two databases of their own on the server (`ledger_scale_partition_<events>`, the
prefix an option; dropped at the end unless --keep) with `bench/scale_load.py` (COPY of
rows built by the ledger's own encoding, one encoding process per core: long-tailed
session lengths, some sessions of 100,000 messages),
then times the same reads on both, taking turns round by round so that the machine's
load falls on both alike: W3 (the context window of a random session, and of the
longest: 100,000 messages from a million events up), W4 (a random session's whole
history), point-in-time windows (at a random version; at a random moment), `verify` of
one session; then, once each, the export of one tenant and `verify` of every session.
Prints a table (p50 / p99 ms) with the disk bytes per message (events + views + their
indexes) against the raw JSON of the messages; writes bench/results/scale-latest.json.
"""

from __future__ import annotations

import argparse
import os
import random
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import psycopg

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.export import export_jsonl, plan_export

from .corpus import TOKEN_LIMIT
from .results import write_diagnostic
from .scale_load import Plan, load_parallel, plan

SERVER = os.environ.get(
    "LEDGER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/postgres"
)
PREFIX = "ledger_scale_partition"
FAMILIES = ("ledger_events", "ledger_messages", "ledger_ended_messages", "ledger_timeline",
            "ledger_sessions", "ledger_streams")  # fmt: skip
# A table's bytes with its indexes and TOAST, over its partitions when it has them
# (pg_partition_tree lists nothing for a table that is not partitioned).
SIZE = (
    "SELECT coalesce((SELECT sum(pg_total_relation_size(relid)) FROM pg_partition_tree(%s)"
    " WHERE isleaf), pg_total_relation_size(%s))"
)


def database_url(name: str) -> str:
    return urlsplit(SERVER)._replace(path=f"/{name}").geturl()


def settings_for(url: str, partitions: int | None) -> Settings:
    return Settings(database_url=url, tokenizer="whitespace", partitions=partitions,
                    pool_size=2, default_tenant="tenant-000")  # fmt: skip


def prepare(events: int, partitions: int | None, workers: int | None,
            prefix: str = PREFIX) -> dict[str, Any]:  # fmt: skip
    """A new database holding `events` events; what it holds and its size."""
    name = f"{prefix}_{events}"
    with psycopg.connect(SERVER, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        conn.execute(f'CREATE DATABASE "{name}"')
    url = database_url(name)
    settings = settings_for(url, partitions)
    migrate(settings)
    the_plan = plan(events)
    started = time.perf_counter()
    shown = [0]

    def progress(done: int) -> None:
        if done // 500_000 > shown[0] or done == events:
            shown[0] = done // 500_000
            rate = done / (time.perf_counter() - started)
            print(f"  {events:,}: {done:,} events loaded, {rate:,.0f}/s", file=sys.stderr)

    raw = load_parallel(settings, the_plan, workers, progress)
    load_s = time.perf_counter() - started
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("VACUUM ANALYZE")
        sizes = {f: int(conn.execute(SIZE, (f, f)).fetchone()[0]) for f in FAMILIES}  # type: ignore[index]
    messages = events - len(the_plan.sessions)
    return {"name": name, "url": url, "plan": the_plan, "load_s": round(load_s, 1),
            "raw_json_bytes": raw, "messages": messages, "sizes": sizes}  # fmt: skip


class Timings:
    """Milliseconds per workload and store size."""

    def __init__(self) -> None:
        self.ms: dict[tuple[int, str], list[float]] = {}

    def time(self, events: int, workload: str, call: Callable[[], object]) -> None:
        started = time.perf_counter()
        call()
        elapsed = (time.perf_counter() - started) * 1000
        self.ms.setdefault((events, workload), []).append(elapsed)

    def summary(self, events: int, workload: str) -> tuple[float, float, int]:
        values = sorted(self.ms[(events, workload)])
        p99 = values[min(len(values) - 1, round(0.99 * (len(values) - 1)))]
        return statistics.median(values), p99, len(values)


def moment_of(ledger: Ledger, tenant: str, key: str, version: int) -> Any:
    entry = ledger.audit(key, tenant=tenant, after_version=version - 1, limit=1)[0]
    return entry.recorded_at


def one_round(ledger: Ledger, events: int, the_plan: Plan, rng: random.Random, calls: int,
              timings: Timings) -> None:  # fmt: skip
    """`calls` calls of each per-session workload on random sessions."""
    for _ in range(calls):
        tenant, key, messages = rng.choice(the_plan.sessions)
        version = rng.randint(2, messages + 1)
        calls_on(ledger, tenant, key, version, the_plan.giants[0], events, timings)


def calls_on(ledger: Ledger, tenant: str, key: str, version: int, giant: tuple[str, str],
             events: int, timings: Timings) -> None:  # fmt: skip
    moment = moment_of(ledger, tenant, key, version)
    limit = TOKEN_LIMIT
    workloads: dict[str, Callable[[], object]] = {
        "W3 window": lambda: ledger.get(key, tenant=tenant, token_limit=limit),
        "W3 window, longest session": lambda: ledger.get(
            giant[1], tenant=giant[0], token_limit=limit
        ),
        "W4 whole history": lambda: ledger.get_all(key, tenant=tenant),
        "window at a past version": lambda: ledger.get(
            key, tenant=tenant, token_limit=limit, as_of_version=version
        ),
        "window at a past moment": lambda: ledger.get(
            key, tenant=tenant, token_limit=limit, as_of=moment
        ),
        "verify one session": lambda: ledger.verify(key, tenant=tenant),
    }
    for name, call in workloads.items():
        timings.time(events, name, call)


def export_tenant(ledger: Ledger, tenant: str) -> int:
    """Every session of the tenant as JSONL; the bytes written."""
    written, after = 0, None
    while keys := ledger.keys(tenant=tenant, after=after, limit=1000):
        for key in keys:
            for line in export_jsonl(ledger, plan_export(ledger, key, tenant=tenant)):
                written += len(line)
        after = keys[-1]
    return written


def whole_store(ledger: Ledger, store: dict[str, Any]) -> dict[str, Any]:
    the_plan: Plan = store["plan"]
    tenant = the_plan.tenants[1]  # not the tenant of the first giant session
    tenant_events = sum(n + 1 for t, _, n in the_plan.sessions if t == tenant)
    started = time.perf_counter()
    written = export_tenant(ledger, tenant)
    export_s = time.perf_counter() - started
    started = time.perf_counter()
    reports = list(ledger.verify_all())
    verify_s = time.perf_counter() - started
    assert all(r.intact for r in reports) and len(reports) == len(the_plan.sessions)
    return {"export_tenant_events": tenant_events, "export_s": round(export_s, 2),
            "export_bytes": written, "verify_all_s": round(verify_s, 2),
            "verify_all_events_per_s": round(the_plan.events / verify_s)}  # fmt: skip


def table(sizes: list[int], stores: dict[int, dict[str, Any]], timings: Timings) -> str:
    head = " | ".join(f"{n:,} events p50 / p99" for n in sizes)
    lines = [f"| workload (ms) | {head} | p50 ratio |", "|---|" + "---|" * (len(sizes) + 1)]
    workloads = sorted(
        {w for _, w in timings.ms}, key=list(dict.fromkeys(w for _, w in timings.ms)).index
    )
    for w in workloads:
        cells = [timings.summary(n, w) for n in sizes]
        ratio = cells[-1][0] / cells[0][0]
        lines.append(f"| {w} | " + " | ".join(f"{p50:.2f} / {p99:.2f}" for p50, p99, _ in cells)
                     + f" | {ratio:.2f}x |")  # fmt: skip

    def total(s: dict[str, Any]) -> float:
        return sum(s["sizes"].values()) / s["messages"]

    def export_rate(s: dict[str, Any]) -> float:
        return s["whole"]["export_tenant_events"] / s["whole"]["export_s"]  # type: ignore[no-any-return]

    rows: dict[str, Callable[[dict[str, Any]], float]] = {
        "export of one tenant (events/s)": export_rate,
        "verify of every session (events/s)": lambda s: s["whole"]["verify_all_events_per_s"],
        "load (events/s)": lambda s: s["plan"].events / s["load_s"],
        "disk bytes per message: events": lambda s: s["sizes"]["ledger_events"] / s["messages"],
        "disk bytes per message: all (events + views + indexes)": total,
        "raw JSON bytes per message": lambda s: s["raw_json_bytes"] / s["messages"],
    }
    for name, value in rows.items():
        if name.startswith(("export", "verify")) and not all("whole" in stores[n] for n in sizes):
            continue  # the whole-store reads are still to come (see `report`)
        cells_text = " | ".join(f"{value(stores[n]):,.0f}" for n in sizes)
        lines.append(f"| {name} | {cells_text} | |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--events", type=int, default=10_000_000)
    parser.add_argument("--baseline", type=int, default=100_000)
    parser.add_argument("--partitions", type=int, default=16)
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--calls", type=int, default=50, help="calls per workload per round")
    parser.add_argument("--workers", type=int, default=None,
                        help="processes encoding the load (default: one per core)")  # fmt: skip
    parser.add_argument("--database-prefix", default=PREFIX,
                        help="the databases' names: <prefix>_<events>")  # fmt: skip
    parser.add_argument("--keep", action="store_true", help="keep the databases")
    args = parser.parse_args(argv)
    sizes = [args.baseline, args.events]
    stores: dict[int, dict[str, Any]] = {}
    try:
        for n in sizes:
            print(f"loading {n:,} events", file=sys.stderr)
            stores[n] = prepare(n, args.partitions, args.workers, args.database_prefix)
        ledgers = {n: open_ledger(settings_for(stores[n]["url"], None)) for n in sizes}
        timings, rng = Timings(), random.Random(3)
        for n in sizes:  # warm: the statements prepared, the connections made
            one_round(ledgers[n], n, stores[n]["plan"], rng, 5, Timings())
        for r in range(args.rounds):
            for n in sizes if r % 2 == 0 else reversed(sizes):
                one_round(ledgers[n], n, stores[n]["plan"], rng, args.calls, timings)
        report(args, argv, sizes, stores, timings)  # the per-session reads, before the long part
        for n in sizes:
            stores[n]["whole"] = whole_store(ledgers[n], stores[n])
            ledgers[n].close()
    finally:
        if not args.keep:
            with psycopg.connect(SERVER, autocommit=True) as conn:
                for n in stores:
                    conn.execute(f'DROP DATABASE IF EXISTS "{stores[n]["name"]}" WITH (FORCE)')
    report(args, argv, sizes, stores, timings)


def report(args: argparse.Namespace, argv: list[str] | None, sizes: list[int],
           stores: dict[int, dict[str, Any]], timings: Timings) -> None:  # fmt: skip
    """The table printed and written to bench/results/scale-latest.json (first without the
    export and `verify` of every session, which take longest at ten million events)."""
    text = table(sizes, stores, timings)
    longest = ", ".join(f"{n:,} events: {stores[n]['plan'].sessions[0][2]:,}" for n in sizes)
    text += f"\n\nMessages in the longest session: {longest}."
    print(text, flush=True)
    command = "python -m bench.scale " + " ".join(argv if argv is not None else sys.argv[1:])
    write_diagnostic("scale-latest.json", {
        "command": command.strip(), "partitions": args.partitions, "table_markdown": text,
        "load_average": os.getloadavg(),
        "stores": {str(n): {k: v for k, v in s.items() if k not in ("plan", "url")}
                   | {"sessions": len(s["plan"].sessions), "giants": len(s["plan"].giants)}
                   for n, s in stores.items()},
        "ms": {f"{n} {w}": v for (n, w), v in timings.ms.items()},
    })  # fmt: skip


if __name__ == "__main__":
    main()
