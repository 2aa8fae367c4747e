"""Group commit on SQLite, in-process: puts a second at 1, 16 and 64 writer threads (one
session each), how many writes each commit held, beside the raw single-writer
INSERT+COMMIT rate of the same disk, taking turns (docs/performance.md).

`python -m bench.diagnostics.group_commit [--puts 200] [--rounds 3]` prints a Markdown
table and writes bench/results/group-commit-latest.json.
"""

from __future__ import annotations

import argparse
import sqlite3
import statistics
import threading
import time
from pathlib import Path
from typing import Any

from bench.results import scratch_dir, write_diagnostic
from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.projections.sqlite import SQLiteLedgerRecorder

BODY = "a message of an ordinary length for an agent's turn, " * 4


def raw_rate(path: Path, writes: int) -> float:
    conn = sqlite3.connect(path, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.execute("CREATE TABLE IF NOT EXISTS raw_rows (id INTEGER PRIMARY KEY, body TEXT)")
    start = time.perf_counter()
    for _ in range(writes):
        conn.execute("INSERT INTO raw_rows (body) VALUES (?)", (BODY,))
    elapsed = time.perf_counter() - start
    conn.close()
    return writes / elapsed


def ledger_rate(workdir: Path, threads: int, puts: int, n: int) -> dict[str, float]:
    settings = Settings(database_url=f"sqlite:///{workdir / f'ledger-{n}.db'}")
    migrate(settings)
    ledger = open_ledger(settings)
    recorder = ledger.recorder
    assert isinstance(recorder, SQLiteLedgerRecorder)
    for t in range(threads):  # the sessions exist: the timed puts are appends
        ledger.put(f"s{t}", {"role": "user", "content": BODY})
    group = recorder.group_commit
    commits, writes = group.commits, group.writes
    each = max(1, puts // threads)

    def writer(t: int) -> None:
        for _ in range(each):
            ledger.put(f"s{t}", {"role": "user", "content": BODY})

    workers = [threading.Thread(target=writer, args=(t,)) for t in range(threads)]
    start = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    elapsed = time.perf_counter() - start
    done = group.writes - writes
    ledger.close()
    return {
        "puts_s": each * threads / elapsed,
        "writes_per_commit": done / (group.commits - commits),
    }


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--puts", type=int, default=200, help="puts per cell and round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", default="1,16,64")
    args = parser.parse_args(argv)
    counts = [int(t) for t in args.threads.split(",")]
    workdir = scratch_dir("group-commit-")
    found: dict[str, list[dict[str, float]]] = {f"{t}": [] for t in counts}
    raw: list[float] = []
    n = 0
    for _ in range(args.rounds):
        raw.append(raw_rate(workdir / "raw.db", args.puts))
        for t in counts:
            found[f"{t}"].append(ledger_rate(workdir, t, args.puts, n))
            n += 1
    raw_s = statistics.median(raw)
    rows: list[dict[str, Any]] = []
    print(f"raw single-writer INSERT+COMMIT: {raw_s:,.0f}/s\n")
    print(
        "| writer threads | puts/s | ÷ raw INSERT+COMMIT | writes per commit |\n|---|---|---|---|"
    )
    for t in counts:
        rate = statistics.median(c["puts_s"] for c in found[f"{t}"])
        batch = statistics.median(c["writes_per_commit"] for c in found[f"{t}"])
        rows.append({"threads": t, "puts_s": rate, "vs_raw": rate / raw_s, "per_commit": batch})
        print(f"| {t} | {rate:,.0f} | {rate / raw_s:.2f}x | {batch:.1f} |")
    fields = {"command": "python -m bench.diagnostics.group_commit", "raw_insert_commit_s": raw_s,
              "rounds": args.rounds, "puts": args.puts, "rows": rows}  # fmt: skip
    print(f"\nwrote {write_diagnostic('group-commit-latest.json', fields)}")


if __name__ == "__main__":
    main()
