"""`LedgerSession` against the OpenAI Agents SDK's own `SQLiteSession`, on the same disk.

Both are driven as the SDK's `Runner` drives a session, through their async calls, each
on a SQLite file of its own in one folder (`--workdir`, default var/bench: a real disk,
where fsync costs). Items are the bench corpus's messages (~400 characters, user and
assistant in turn) as easy input messages. The ledger is opened as a host opens it
(`open_ledger`, its default settings: cl100k_base token counts on every write).

| workload | what |
|---|---|
| add | `add_items([item])`, one item a call, to one session |
| get-50 | `get_items(limit=50)` of a session of `--items` items |
| get-all | `get_items()` of a session of `--items` items |
| turn | a Runner's turn: `get_items(limit=50)`, then `add_items([user, assistant])` |

The two stores take turns, `--rounds` times (wall-clock time here swings by a third
with the machine's load); a figure is the median of the rounds. `--callgrind` adds the
steady measure: instructions per `add_items` of one item, counted by callgrind in a
process of each (WARM + N writes minus WARM writes, over N; SQLite in /dev/shm).

    python -m bench.openai_agents_session [--items 2000] [--rounds 3] [--callgrind]

prints a Markdown table and writes bench/results/openai-agents-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from bench.corpus import conversation
from bench.instructions import SCRATCH, callgrind_total
from bench.results import write_diagnostic

STORES = ("LedgerSession", "SQLiteSession")
WARM = 200  # callgrind: writes in both runs (tables, session, caches), cancelled out


def open_store(name: str, folder: Path) -> tuple[Any, Callable[[], None]]:
    """A session of `name` on a new SQLite file in `folder`, and how to close it."""
    if name == "SQLiteSession":
        from agents.memory import SQLiteSession

        session = SQLiteSession("bench", str(folder / "agents.db"))
        return session, session.close
    from session_ledger.api.bootstrap import migrate, open_ledger
    from session_ledger.api.openai_agents import LedgerSession
    from session_ledger.api.settings import Settings

    settings = Settings(database_url=f"sqlite:///{folder / 'ledger.db'}")
    migrate(settings)
    ledger = open_ledger(settings)
    return LedgerSession("bench", ledger=ledger), ledger.close


async def timed(calls: int, call: Callable[[int], Awaitable[Any]]) -> float:
    """Seconds per call of `calls` calls."""
    started = time.perf_counter()
    for i in range(calls):
        await call(i)
    return (time.perf_counter() - started) / calls


async def measure(name: str, folder: Path, items: list[dict[str, Any]]) -> dict[str, float]:
    """Seconds per call of each workload, for one store, on fresh files in `folder`."""
    figures: dict[str, float] = {}
    session, close = open_store(name, folder / "add")
    try:
        figures["add"] = await timed(len(items), lambda i: session.add_items([items[i]]))
        reads = max(len(items) // 10, 20)
        figures["get-50"] = await timed(reads, lambda i: session.get_items(limit=50))
        figures["get-all"] = await timed(20, lambda i: session.get_items())
    finally:
        close()
    session, close = open_store(name, folder / "turn")
    try:

        async def turn(i: int) -> None:
            await session.get_items(limit=50)
            await session.add_items(items[2 * i : 2 * i + 2])

        figures["turn"] = await timed(len(items) // 2, turn)
    finally:
        close()
    return figures


def worker(name: str, writes: int) -> None:
    """In a process under callgrind: WARM + `writes` single-item add_items calls."""
    items = [dict(m) for m in conversation(WARM + writes)]
    folder = Path(tempfile.mkdtemp(prefix="agents-", dir=SCRATCH))
    try:
        session, close = open_store(name, folder)
        loop = asyncio.new_event_loop()
        for item in items[: WARM + writes]:
            loop.run_until_complete(session.add_items([item]))
        loop.close()
        close()
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def instructions(name: str, writes: int) -> int:
    """Callgrind's total instructions of one worker process of `name` (the ledger's
    default settings: no LEDGER_* variables reach it)."""
    env = {"PYTHONHASHSEED": "0", "PATH": "/usr/bin:/bin"}
    args = ["--worker", name, str(writes)]
    return callgrind_total(name, "bench.openai_agents_session", args, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=2000, help="items added (add, turn)")
    parser.add_argument("--rounds", type=int, default=3, help="turns of the two stores")
    parser.add_argument("--workdir", type=Path, default=Path("var/bench"))
    parser.add_argument("--callgrind", type=int, nargs="?", const=300, default=0,
                        metavar="WRITES", help="also count instructions per add_items")  # fmt: skip
    parser.add_argument("--worker", nargs=2, help=argparse.SUPPRESS)  # store, writes
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]))
        return
    items = [dict(m) for m in conversation(args.items)]
    args.workdir.mkdir(parents=True, exist_ok=True)
    rounds: dict[str, list[dict[str, float]]] = {s: [] for s in STORES}
    for r in range(args.rounds):
        for name in STORES if r % 2 == 0 else STORES[::-1]:  # alternate who goes first
            folder = Path(tempfile.mkdtemp(prefix="agents-", dir=args.workdir))
            try:
                (folder / "add").mkdir()
                (folder / "turn").mkdir()
                rounds[name].append(asyncio.run(measure(name, folder, items)))
            finally:
                shutil.rmtree(folder, ignore_errors=True)
    median = {s: {w: statistics.median(r[w] for r in rounds[s]) for w in rounds[s][0]}
              for s in STORES}  # fmt: skip
    print(f"LedgerSession vs SQLiteSession, {args.items} items, SQLite files in "
          f"{args.workdir}, median of {args.rounds} rounds:\n")  # fmt: skip
    print("| workload | LedgerSession ms/call | SQLiteSession ms/call | SQLiteSession / ledger |")
    print("|---|---|---|---|")
    for w in median["LedgerSession"]:
        ledger, sqlite = median["LedgerSession"][w], median["SQLiteSession"][w]
        print(f"| {w} | {ledger * 1e3:.3f} | {sqlite * 1e3:.3f} | {sqlite / ledger:.2f}x |")
    fields: dict[str, Any] = {
        "command": " ".join(["python -m bench.openai_agents_session", *sys.argv[1:]]),
        "items": args.items,
        "seconds_per_call": median,
        "rounds": rounds,
        "ratio_sqlite_over_ledger": {
            w: median["SQLiteSession"][w] / median["LedgerSession"][w]
            for w in median["LedgerSession"]
        },
    }
    if args.callgrind:
        if shutil.which("valgrind") is None:
            sys.exit("valgrind is needed for --callgrind (apt-get install valgrind)")
        n = args.callgrind
        per_add = {s: (instructions(s, n) - instructions(s, 0)) / n for s in STORES}
        print(f"\nInstructions per add_items of one item (callgrind, ({WARM} + {n}) - {WARM} "
              f"calls, over {n}; SQLite in /dev/shm):\n")  # fmt: skip
        print("| store | instructions per add_items |\n|---|---|")
        for s in STORES:
            print(f"| {s} | {per_add[s]:,.0f} |")
        ratio = per_add["SQLiteSession"] / per_add["LedgerSession"]
        print(f"\nSQLiteSession / LedgerSession: {ratio:.2f}x")
        fields["instructions_per_add_items"] = per_add
    print(f"\nwritten: {write_diagnostic('openai-agents-latest.json', fields)}")


if __name__ == "__main__":
    main()
