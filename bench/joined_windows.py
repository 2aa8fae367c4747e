"""Windows whose messages meet at whitespace: what counting them joined costs.

cl100k_base windows are counted joined after each message that is empty or ends in
whitespace (`domain.tokens.JoinedWindow`). For four shapes of one conversation (plain
texts; every text ending in a newline; every other one; every other one empty), times
`Ledger.get(token_limit=3000)` on SQLite at 200 and 10,000 messages, and LlamaIndex's
`ChatMemoryBuffer.get` at 200 (it tokenizes the history again for each shorter window:
at 10,000 it takes minutes), checking that both give the same window. Prints a Markdown
table (medians, ms) and writes bench/results/joined-windows-<time>.json and
joined-windows-latest.json.
`python -m bench.joined_windows [--reads 200]`
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from bench.results import RESULTS, revision
from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings

TOKEN_LIMIT = 3000
SIZES = (200, 10_000)
WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "a",
    "lazy",
    "dog",
    "while",
    "tokens",
    "fill",
    "the",
    "window",
]
SHAPES: dict[str, Callable[[int, str], str]] = {
    "plain": lambda i, text: text,
    "newline-ended": lambda i, text: text + "\n",
    "every other newline-ended": lambda i, text: text + "\n" if i % 2 else text,
    "every other empty": lambda i, text: "" if i % 2 else text,
}


def conversation(shape: Callable[[int, str], str], size: int) -> list[dict[str, str]]:
    rng = random.Random(size)
    return [
        {"role": "user" if i % 2 == 0 else "assistant",
         "content": shape(i, " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 40))))}
        for i in range(size)
    ]  # fmt: skip


def median_ms(call: Callable[[], object], reads: int) -> float:
    call()  # (a first read warms the caches)
    times = []
    for _ in range(reads):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def run(reads: int) -> dict[str, dict[str, Any]]:
    from llama_index.core.base.llms.types import ChatMessage
    from llama_index.core.memory import ChatMemoryBuffer

    folder = Path("/dev/shm") if Path("/dev/shm").is_dir() else None
    with tempfile.TemporaryDirectory(dir=folder) as scratch:
        settings = Settings(database_url=f"sqlite:///{scratch}/ledger.db", tokenizer="cl100k_base")
        migrate(settings)
        ledger = open_ledger(settings)
        cells: dict[str, dict[str, Any]] = {}
        for name, shape in SHAPES.items():
            cell: dict[str, Any] = {}
            for size in SIZES:
                key = f"{name}-{size}"
                ledger.set(key, conversation(shape, size))
                cell[f"ledger {size}"] = median_ms(
                    lambda key=key: ledger.get(key, token_limit=TOKEN_LIMIT), reads
                )
                cell[f"window {size}"] = len(ledger.get(key, token_limit=TOKEN_LIMIT))
            history = conversation(shape, SIZES[0])
            buffer = ChatMemoryBuffer.from_defaults(
                chat_history=[ChatMessage.model_validate(m) for m in history],
                token_limit=TOKEN_LIMIT,
            )
            cell[f"ChatMemoryBuffer {SIZES[0]}"] = median_ms(buffer.get, max(5, reads // 20))
            theirs = [m.content for m in buffer.get()]
            ours = [m.content for m in ledger.get(f"{name}-{SIZES[0]}", token_limit=TOKEN_LIMIT)]
            cell["same window"] = theirs == ours
            cells[name] = cell
        ledger.close()
    return cells


def table(cells: dict[str, dict[str, Any]]) -> str:
    small, large = SIZES
    plain = cells["plain"][f"ledger {large}"]
    lines = [
        f"| messages | ledger {small} | ledger {large:,} (window) | to plain | "
        f"ChatMemoryBuffer {small} | ledger / it at {small} | same window |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, c in cells.items():
        lines.append(
            f"| {name} | {c[f'ledger {small}']:.2f} | {c[f'ledger {large}']:.2f} "
            f"({c[f'window {large}']}) | {c[f'ledger {large}'] / plain:.2f}x | "
            f"{c[f'ChatMemoryBuffer {small}']:.2f} | "
            f"{c[f'ledger {small}'] / c[f'ChatMemoryBuffer {small}']:.3f}x | "
            f"{'yes' if c['same window'] else 'NO'} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reads", type=int, default=200, help="timed reads per cell")
    args = parser.parse_args()
    started = time.time()
    cells = run(args.reads)
    print(f"get(token_limit={TOKEN_LIMIT}) in ms (medians; SQLite, cl100k_base):\n")
    print(table(cells))
    record = {"kind": "joined-windows", "revision": revision(), "reads": args.reads,
              "token_limit": TOKEN_LIMIT, "cells": cells}  # fmt: skip
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    RESULTS.mkdir(exist_ok=True)
    for path in (RESULTS / f"joined-windows-{stamp}.json", RESULTS / "joined-windows-latest.json"):
        path.write_text(json.dumps(record, indent=2) + "\n")
    if not all(c["same window"] for c in cells.values()):
        raise SystemExit("a window differs from ChatMemoryBuffer's")


if __name__ == "__main__":
    main()
