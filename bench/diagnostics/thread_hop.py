"""What a write costs in the caller's thread, and what handing it to a worker thread adds.

`Ledger.put` is a call in the caller's thread; OpenAI Agents' `SQLiteSession.add_items`
(and `LedgerSession.add_items`) is async and hands its write to a worker thread and back
(`asyncio.to_thread`), as the SDK's users call it. W1 times each store through its own
API, so its ratio to `SQLiteSession` holds that round trip, whose cost depends on the
machine (waking a thread on another core). This times, in 100-call blocks taken in
turns on SQLite files in one folder (a real disk, where fsync costs), medians of the
blocks, ms a call:

| subject | what |
|---|---|
| ledger put | `Ledger.put_messages` of one message, in the calling thread |
| ledger put in a thread | the same through `asyncio.to_thread` |
| LedgerSession.add_items | one item |
| SQLiteSession insert | its own insert and commit, in the calling thread (1) |
| SQLiteSession.add_items | one item |
| round trip alone | `asyncio.to_thread` of a call that does nothing |

(1) through its private `_write_connection` and `_insert_items`; left out if they go.

    python -m bench.diagnostics.thread_hop [--rounds 10] [--workdir var/bench]

(`taskset -c 0` before it keeps every thread on one core: the round trip without the
wake-up of another core, for diagnosis only.)

prints a Markdown table and writes bench/results/thread-hop-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.corpus import conversation
from bench.results import write_diagnostic

BLOCK = 100  # calls a block
WARM = 50  # calls of each subject first, not timed: tables, sessions and caches made


def subjects(
    folder: Path, loop: asyncio.AbstractEventLoop, stack: contextlib.ExitStack
) -> dict[str, Callable[[Any], Any]]:
    """Each subject's one call, on stores of its own in `folder` (closed by `stack`)."""
    from agents.memory import SQLiteSession

    from session_ledger.api.bootstrap import migrate, open_ledger
    from session_ledger.api.openai_agents import LedgerSession
    from session_ledger.api.settings import Settings

    settings = Settings(database_url=f"sqlite:///{folder / 'ledger.db'}")
    migrate(settings)
    ledger = open_ledger(settings)
    stack.callback(ledger.close)
    agents = SQLiteSession("hop", str(folder / "agents.db"))
    stack.callback(agents.close)
    session = LedgerSession("items", ledger=ledger)
    run = loop.run_until_complete
    found: dict[str, Callable[[Any], Any]] = {
        "ledger put": lambda m: ledger.put_messages("calling", [m]),
        "ledger put in a thread": lambda m: run(
            asyncio.to_thread(ledger.put_messages, "thread", [m])
        ),
        "LedgerSession.add_items": lambda m: run(session.add_items([m])),
        "SQLiteSession.add_items": lambda m: run(agents.add_items([m])),
        "round trip alone": lambda m: run(asyncio.to_thread(lambda: None)),
    }
    if hasattr(agents, "_write_connection") and hasattr(agents, "_insert_items"):

        def insert(m: Any) -> None:
            with agents._write_connection() as conn:
                agents._insert_items(conn, [m])
                conn.commit()

        found["SQLiteSession insert"] = insert
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--workdir", type=Path, default=Path("var/bench"))
    args = parser.parse_args()
    args.workdir.mkdir(parents=True, exist_ok=True)
    folder = Path(tempfile.mkdtemp(prefix="thread-hop-", dir=args.workdir))
    loop = asyncio.new_event_loop()
    with contextlib.ExitStack() as stack:
        stack.callback(shutil.rmtree, folder, ignore_errors=True)
        stack.callback(loop.close)
        calls = subjects(folder, loop, stack)
        messages = iter(conversation((WARM + BLOCK * args.rounds) * len(calls)))
        for _ in range(WARM):
            for call in calls.values():
                call(dict(next(messages)))
        blocks: dict[str, list[float]] = {name: [] for name in calls}
        for r in range(args.rounds):
            order = list(calls) if r % 2 == 0 else list(reversed(calls))
            for name in order:
                block = [dict(next(messages)) for _ in range(BLOCK)]
                start = time.perf_counter()
                for message in block:
                    calls[name](message)
                blocks[name].append((time.perf_counter() - start) / BLOCK * 1e3)
    figures = {name: statistics.median(times) for name, times in blocks.items()}
    print(f"ms a call, median of {args.rounds} blocks of {BLOCK} taken in turns, "
          f"SQLite files in {args.workdir}:\n")  # fmt: skip
    print("| subject | ms a call |\n|---|---|")
    for name, ms in figures.items():
        print(f"| {name} | {ms:.3f} |")
    path = write_diagnostic(
        "thread-hop-latest.json", {"rounds": args.rounds, "block": BLOCK, "ms_a_call": figures}
    )
    print(f"\nwritten: {path}")


if __name__ == "__main__":
    main()
