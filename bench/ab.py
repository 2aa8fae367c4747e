"""`python -m bench.ab --base REV [--head REV|worktree]`: two revisions, the same
workloads, measured in turns in one run.

Each revision runs in a worker process of its own (bench/ab_sides.py,
bench/ab_worker.py) that drives it through the public API only. For each store, both
sides open a fresh store and load the same read history (not timed); then, round after
round, each workload runs one block on each side, the side that goes first changing
every round (bench/blocks.py), so that the hour's drift falls on both. A block's figure
is a time per call: W1 the mean µs of a single-message put (its calls over their time,
as W1's rate), W0 the same for puts that each start a session, W3 (the 4,000-token
window) and W4 (the whole history) the median ms of the block's reads. head/base is
taken within each round, and its median reported.

Prints a Markdown table and writes bench/results/ab-<UTC time>.json.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import shlex
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from bench.ab_sides import WORKTREE, Side, source_tree
from bench.blocks import Comparison, turn_orders
from bench.postgres import ScratchDatabases, server_url
from bench.results import RESULTS, write_diagnostic

SIDES = ("base", "head")
PUTS = {"W0", "W1"}  # the write workloads: their figure is the mean of a block
WORKLOADS = {  # the workload, what a block's figure is, and what it measures
    "W0": ("µs a put", "single-message puts that each start a session (a conversation's first)"),
    "W1": ("µs a put", "single-message puts to one session, one durable call each"),
    "W3": ("ms a read", "the 4,000-token window of a {history:,}-message session"),
    "W4": ("ms a read", "the whole history of a {history:,}-message session, decoded"),
}
STORES = ("sqlite", "postgres")


@dataclass(frozen=True)
class Plan:
    pairs: int  # pairs of worker processes, one after the other, each with fresh stores
    rounds: int  # rounds per pair: a block of each workload on each side
    w1_block: int  # puts in a W1 block
    w3_block: int  # reads in a W3 block
    w4_block: int  # reads in a W4 block
    history: int  # messages of the history W3 and W4 read

    def calls(self, workload: str) -> int:
        blocks = {"W1": self.w1_block, "W3": self.w3_block, "W4": self.w4_block}
        return blocks["W1" if workload == "W0" else workload]


# Short blocks and many rounds: on this machine a block's time moves by half from one
# second to the next, and the median of many rounds' ratios is what stays put. Several
# pairs of processes: one process can run the same code a few percent faster than
# another for all of a run (its memory layout, its hash seed), which rounds cannot average.
FULL = Plan(pairs=5, rounds=12, w1_block=50, w3_block=20, w4_block=2, history=10_000)
QUICK = Plan(pairs=1, rounds=10, w1_block=20, w3_block=10, w4_block=1, history=1_000)

Blocks = dict[str, dict[str, list[float]]]  # workload -> side -> each block's figure


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def block_figure(workload: str, us: list[float]) -> float:
    """W0, W1: the mean µs of the block's puts; a read: the median ms of the block's calls."""
    return statistics.fmean(us) if workload in PUTS else statistics.median(us) / 1000


def measure(
    sides: dict[str, Side],
    store: str,
    workloads: list[str],
    plan: Plan,
    workdir: Path,
    databases: ScratchDatabases | None,
    blocks: Blocks,
) -> dict[str, Any]:
    """Every workload on `store`, both sides in turns, the first of `sides` first; each
    block's figure is appended to `blocks`. Returns what each side said when opened."""
    reads = any(w in ("W3", "W4") for w in workloads)
    opened: dict[str, Any] = {}
    with contextlib.ExitStack() as cleanup:
        for name, side in sides.items():
            url = None
            if store == "postgres":
                assert databases is not None
                url = databases.create(f"ab_{name}")
                cleanup.callback(databases.drop, url)
            folder = workdir / f"{store}-{name}"
            folder.mkdir(parents=True)
            opened[name] = side.request(
                "open",
                store=store,
                workdir=str(folder),
                postgres_url=url,
                history=plan.history if reads else 0,
                w1_messages=plan.rounds * plan.w1_block if PUTS & set(workloads) else 0,
            )
            cleanup.callback(side.request, "close", store=store)
            log(f"{store}: {name} opened, {opened[name]['load_s']:.1f} s to load")
        for r, order in enumerate(turn_orders(list(sides), plan.rounds)):
            for workload in workloads:
                for name in order:
                    answer = sides[name].request(
                        "block", store=store, workload=workload, calls=plan.calls(workload)
                    )
                    blocks[workload][name].append(block_figure(workload, answer["us"]))
            log(f"{store}: round {r + 1}/{plan.rounds}")
    return opened


def per_pair(c: Comparison, pairs: int) -> list[float]:
    """The median ratio of each pair of processes' rounds."""
    ratios, rounds = c.block_ratios, len(c.block_ratios) // pairs
    return [statistics.median(ratios[i * rounds : (i + 1) * rounds]) for i in range(pairs)]


def figures(c: Comparison, pairs: int) -> dict[str, Any]:
    """A comparison as the JSON keeps it: the medians, the ratios and every block."""
    return {
        "base": c.base,
        "head": c.head,
        "ratio": c.ratio,
        "ratio_interval_95": c.ratio_interval,
        "pair_ratios": per_pair(c, pairs),
        "round_ratios": c.block_ratios,
        "base_blocks": c.base_blocks,
        "head_blocks": c.head_blocks,
    }


def _fmt(value: float) -> str:
    return f"{value:,.0f}" if value >= 100 else f"{value:.3g}"


def change(ratio: float) -> str:
    """head/base of a time, in words."""
    if ratio == 1:
        return "the same"
    return f"{abs(ratio - 1):.1%} {'slower' if ratio > 1 else 'faster'}"


def table(results: dict[str, dict[str, Comparison]], tolerance: float, pairs: int) -> str:
    """One row per workload and store: the medians, head/base, and each round's ratio."""
    lines = [
        "| workload | store | figure | base | head | head/base | 95% interval | change | "
        f"head/base <= {1 + tolerance:g} | per pair of processes | per round |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for store, by_workload in results.items():
        for workload, c in by_workload.items():
            rounds = ", ".join(f"{r:.3f}" for r in c.block_ratios)
            holds = "yes" if c.ratio <= 1 + tolerance else "NO"
            low, high = c.ratio_interval
            pair = ", ".join(f"{r:.3f}" for r in per_pair(c, pairs))
            lines.append(
                f"| {workload} | {store} | {WORKLOADS[workload][0]} | {_fmt(c.base)} | "
                f"{_fmt(c.head)} | {c.ratio:.3f} | {low:.3f}-{high:.3f} | {change(c.ratio)} | "
                f"{holds} | {pair} | {rounds} |"
            )
    return "\n".join(lines)


@contextlib.contextmanager
def started(
    trees: dict[str, tuple[Path, str]], scratch: Path, pair: int
) -> Iterator[dict[str, Side]]:
    """Pair number `pair` of workers, one per tree (path, label). Every other pair starts
    the head first, and lets it go first in the rounds."""
    names = list(trees) if pair % 2 == 0 else list(reversed(trees))
    sides: dict[str, Side] = {}
    try:
        for name in names:
            side = Side(name, *trees[name], scratch / f"{name}-{pair}", seed=pair)
            sides[name] = side
            log(f"pair {pair + 1}, {name}: {side.label}, session_ledger.domain from {side.domain}")
        yield sides
    finally:
        for side in sides.values():
            side.close()


def parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0].strip("`"))
    parser.add_argument("--base", required=True, help="the revision compared with (git rev)")
    parser.add_argument("--head", default=WORKTREE, help=f"a git rev, or {WORKTREE} (default)")
    parser.add_argument("--workloads", default="W1,W3,W4", help="some of W0, W1, W3, W4")
    parser.add_argument("--stores", default=",".join(STORES), help="some of sqlite, postgres")
    parser.add_argument("--quick", action="store_true", help="fewer, smaller blocks: a minute")
    parser.add_argument("--pairs", type=int, help="pairs of worker processes, one after another")
    parser.add_argument("--rounds", type=int, help="rounds per pair of processes")
    parser.add_argument("--tolerance", type=float, default=0.05, help="head/base allowed: 1+x")
    parser.add_argument("--workdir", type=Path, default=Path("var/bench"), help="on a disk")
    parser.add_argument("--out", type=Path, default=RESULTS, help="where the JSON goes")
    args = parser.parse_args(argv)
    args.workloads = args.workloads.split(",")
    args.stores = args.stores.split(",")
    for value, allowed in ((args.workloads, WORKLOADS), (args.stores, STORES)):
        unknown = sorted(set(value) - set(allowed))
        if unknown:
            parser.error(f"unknown {', '.join(unknown)}: choose from {', '.join(allowed)}")
    return args


def main(argv: list[str] | None = None) -> dict[str, Any]:
    raw = sys.argv[1:] if argv is None else argv
    args = parse(raw)
    plan = QUICK if args.quick else FULL
    plan = Plan(**{**asdict(plan), "pairs": args.pairs or plan.pairs})
    plan = Plan(**{**asdict(plan), "rounds": args.rounds or plan.rounds})
    databases: ScratchDatabases | None = None
    if "postgres" in args.stores:
        databases = ScratchDatabases(server_url())
        why = databases.reachable()
        if why is not None:
            log(f"PostgreSQL unreachable, left out: {why}")
            args.stores.remove("postgres")
            databases = None
    blocks: dict[str, Blocks] = {
        store: {w: {name: [] for name in SIDES} for w in args.workloads} for store in args.stores
    }
    opened: dict[str, dict[str, Any]] = {}
    imported: list[dict[str, dict[str, str]]] = []
    load = [os.getloadavg()[0]]
    started_at = time.time()
    args.workdir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="ab-", dir=args.workdir) as scratch:
        trees = {
            name: source_tree(rev, Path(scratch) / f"{name}-tree")
            for name, rev in zip(SIDES, (args.base, args.head), strict=True)
        }
        for pair in range(plan.pairs):
            with started(trees, Path(scratch), pair) as sides:
                imported.append({name: side.imported_from for name, side in sides.items()})
                for store in args.stores:
                    workdir = Path(scratch) / f"pair-{pair}"
                    opened[store] = measure(
                        sides, store, args.workloads, plan, workdir, databases, blocks[store]
                    )
    load.append(os.getloadavg()[0])
    labels = {name: label for name, (_, label) in trees.items()}
    results = {
        store: {w: Comparison(tuple(b["base"]), tuple(b["head"])) for w, b in by_w.items()}
        for store, by_w in blocks.items()
    }
    text = table(results, args.tolerance, plan.pairs)
    handed = {f"{s} {n}": o["messages"] for s, by in opened.items() for n, o in by.items()}
    print(
        f"\nbase {labels['base']} against head {labels['head']}: {plan.pairs} pair(s) of "
        f"processes, {plan.rounds} rounds each, in turns, {time.time() - started_at:.0f} s, "
        f"load average {load[0]:.1f} then {load[1]:.1f}; medians of the blocks, head/base "
        "the median of the rounds' ratios (above 1: the head took longer) and where it "
        "lies with 95% confidence:\n"
    )
    print(text)
    print()
    for workload in args.workloads:
        print(f"- {workload}: {WORKLOADS[workload][1].format(history=plan.history)}")
    if len(set(handed.values())) > 1:
        print(f"\nMessages were handed over differently: {handed}")
    record: dict[str, Any] = {
        "command": shlex.join(["python", "-m", "bench.ab", *raw]),
        "sides": labels,
        "imported_from": imported,
        "plan": asdict(plan),
        "load_average": load,
        "messages_handed_as": handed,
        "tolerance": args.tolerance,
        "results": {
            store: {
                w: {"unit": WORKLOADS[w][0], **figures(c, plan.pairs)}
                for w, c in by_workload.items()
            }
            for store, by_workload in results.items()
        },
        "table_markdown": text,
    }
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started_at))
    log(f"\nwrote {write_diagnostic(f'ab-{stamp}.json', record, args.out)}")
    return record


if __name__ == "__main__":
    main()
