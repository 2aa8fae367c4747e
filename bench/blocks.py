"""Timed blocks that take turns: how the diagnostics compare writers at one machine speed.

Each writer runs a block of puts per round, in a new random order every round, so a
slow or fast moment of the machine falls on all of them; a writer's figure is the
median of its blocks.
"""

from __future__ import annotations

import argparse
import random
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, TypeVar

from bench.results import write_diagnostic

K = TypeVar("K")
R = TypeVar("R")


def in_turns(
    writers: Mapping[K, Callable[[], None]], rounds: int, block: int, rng: random.Random
) -> dict[K, list[float]]:
    """µs per call of each writer, one figure per block of `block` calls."""
    times: dict[K, list[float]] = {name: [] for name in writers}
    names = list(writers)
    for _ in range(rounds):
        for name in rng.sample(names, len(names)):  # a new order every round
            put = writers[name]
            t0 = time.perf_counter_ns()
            for _ in range(block):
                put()
            times[name].append((time.perf_counter_ns() - t0) / block / 1000)
    return times


def run_diagnostic(
    doc: str,
    kind: str,
    defaults: tuple[int, int],
    measure: Callable[[Path, int, int], R],
    table: Callable[[R], str],
    record: Callable[[R], dict[str, Any]],
) -> None:
    """The command line of a diagnostic timed in turns (--rounds, --block, --dir): measure
    in a scratch directory, print the table, write bench/results/<kind>-latest.json."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=defaults[0])
    parser.add_argument("--block", type=int, default=defaults[1], help="puts per writer a round")
    parser.add_argument("--dir", type=Path, default=None, help="default: a temporary dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix=f"{kind}-", dir=args.dir) as scratch:
        result = measure(Path(scratch), args.rounds, args.block)
    print(f"{args.rounds} rounds of {args.block} single-message puts per writer; medians:\n")
    print(table(result))
    write_diagnostic(
        f"{kind}-latest.json", {"rounds": args.rounds, "block": args.block, **record(result)}
    )
