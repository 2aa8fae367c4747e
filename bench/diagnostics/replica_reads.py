"""What a read served by a read replica costs, against the same read on the primary.

Three readers of one session (a history of `--messages` messages) take turns, so load on
the machine falls on each alike: a ledger with no replicas (the primary answers), a
ledger whose reads a standby serves (no version named), and the same with `min_version`
(the version another process wrote: the standby's version of the session is read first).
Each reads the context window of 4,000 tokens; the figures are the median time of a
read, and the share of reads the standby served (it read view rows).

`python -m bench.diagnostics.replica_reads [--messages 1000] [--reads 2000]` makes a
primary and a streaming standby of its own (tests/postgres_pair.py: initdb and
pg_basebackup, free ports, a temporary folder, removed after), prints a Markdown table and
writes bench/results/replica-reads-latest.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.postgres_pair import PostgresPair, postgres_bin

RESULTS = Path(__file__).resolve().parents[1] / "results" / "replica-reads-latest.json"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=1000)
    parser.add_argument("--reads", type=int, default=2000)
    args = parser.parse_args()
    bin_dir = postgres_bin()
    if bin_dir is None:
        raise SystemExit("no PostgreSQL server binaries: set LEDGER_TEST_PG_BIN")
    pair = PostgresPair(bin_dir).start()
    try:
        rows = measure(pair, args.messages, args.reads)
    finally:
        pair.close()
    print(f"| reader ({args.messages:,} messages, window of 4,000 tokens) | median ms | "
          "ratio | served by the standby |\n|---|---|---|---|")  # fmt: skip
    base = rows[0]["median_ms"]
    for r in rows:
        print(f"| {r['reader']} | {r['median_ms']:.3f} | {r['median_ms'] / base:.2f}x | "
              f"{r['standby_share']:.0%} |")  # fmt: skip
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps({"command": vars(args), "rows": rows}, indent=2))


def measure(pair: PostgresPair, messages: int, reads: int) -> list[dict[str, object]]:
    base = {"database_url": pair.primary_url, "tokenizer": "cl100k_base"}
    migrate(Settings(**base))  # type: ignore[arg-type]
    writer = open_ledger(Settings(**base))  # type: ignore[arg-type]
    key = f"bench-{time.time_ns()}"
    for start in range(0, messages, 100):
        version = writer.put_messages(key, [
            {"role": "user" if i % 2 else "assistant", "content": f"message {i} " + "word " * 60}
            for i in range(start, min(messages, start + 100))
        ]).version  # fmt: skip
    primary = open_ledger(Settings(**base))  # type: ignore[arg-type]
    replicated = open_ledger(Settings(**base, read_database_urls=pair.standby_url))  # type: ignore[arg-type]
    standby = replicated.views.read_routing.standbys[0]  # type: ignore[union-attr]
    deadline = time.monotonic() + 60
    while not standby.serving or replicated.window(key).version != version:
        if time.monotonic() > deadline:
            raise SystemExit(f"the standby does not serve reads: {standby.problem}")
        time.sleep(0.05)
    readers: list[tuple[str, Ledger, dict[str, int]]] = [
        ("primary (no replicas)", primary, {}),
        ("standby", replicated, {}),
        ("standby, min_version", replicated, {"min_version": version}),
    ]
    times: dict[str, list[float]] = {name: [] for name, _, _ in readers}
    served: dict[str, int] = dict.fromkeys(times, 0)
    for _ in range(reads):
        for name, ledger, kwargs in readers:
            before = standby.views.rows_read
            started = time.perf_counter()
            ledger.window(key, token_limit=4000, **kwargs)  # type: ignore[arg-type]
            times[name].append(time.perf_counter() - started)
            served[name] += standby.views.rows_read > before
    for ledger in (writer, primary, replicated):
        ledger.close()
    return [
        {"reader": name, "median_ms": statistics.median(t) * 1000,
         "standby_share": served[name] / len(t), "reads": len(t)}
        for name, t in times.items()
    ]  # fmt: skip


if __name__ == "__main__":
    main()
