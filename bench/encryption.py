"""`python -m bench.encryption`: what encryption at rest costs, A/B in one run.

Each of our stores twice, side by side: the same store without a master key (clear) and
with one (every session sealed). W1 (one durable put of one message), W3 (the 4,000-token
window of a 10,000-message history) and W4 (the whole 10,000-message history) run in
alternating blocks, the side that goes first changing every round (`blocks.py`), so a
slow or fast moment of a shared machine falls on both sides of each ratio. Prints a
Markdown table of encrypted / clear per call time (median of the rounds' ratios, with
its 95% interval) and writes bench/results/encryption-<UTC time>.json and
encryption-latest.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from . import corpus, results
from .blocks import Comparison, turn_orders
from .ledger import LedgerStore
from .postgres import ScratchDatabases, server_url
from .stores import Context

HISTORY = 10_000
# Calls per block: a block lasts about a second on this machine's slower moments.
BLOCK_CALLS = {"W1": 40, "W3@10000": 20, "W4@10000": 1}


def _timed(call: Callable[[int], Any], calls: int) -> float:
    """Seconds per call, over `calls` calls."""
    t0 = time.perf_counter()
    for n in range(calls):
        call(n)
    return (time.perf_counter() - t0) / calls


def _workloads(store: LedgerStore, natives: list[Any], rnd: int) -> dict[str, Callable[[int], Any]]:
    return {
        "W1": lambda n: store.append(f"w1-{rnd}", natives[n % len(natives)]),
        "W3@10000": lambda n: store.window("w3"),
        "W4@10000": lambda n: store.history("w3"),
    }


def measure(
    backend: str, workdir: Path, urls: list[str | None], rounds: int
) -> dict[str, Comparison]:
    """The comparisons of one backend: clear (base) against encrypted (head)."""
    messages = corpus.conversation(HISTORY)
    window_rows = corpus.window_size(messages)
    sides: dict[str, LedgerStore] = {}
    for sealed, url in zip((False, True), urls, strict=True):
        store = LedgerStore(backend, encrypted=sealed)
        where = workdir / f"{backend}-{'encrypted' if sealed else 'clear'}"
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir(parents=True)
        store.open(Context(where, url, window_rows))
        natives = [store.native(m) for m in messages]
        store.load("w3", natives)
        sides["encrypted" if sealed else "clear"] = store
    natives = {name: [s.native(m) for m in messages[:100]] for name, s in sides.items()}
    blocks: dict[str, dict[str, list[float]]] = {w: {"clear": [], "encrypted": []}
                                                 for w in BLOCK_CALLS}  # fmt: skip
    try:
        for rnd, order in enumerate(turn_orders(["clear", "encrypted"], rounds)):
            for workload, calls in BLOCK_CALLS.items():
                for name in order:
                    call = _workloads(sides[name], natives[name], rnd)[workload]
                    blocks[workload][name].append(_timed(call, calls))
            print(f"{backend}: round {rnd + 1}/{rounds}", file=sys.stderr, flush=True)
    finally:
        for store in sides.values():
            store.close()
    return {w: Comparison(tuple(b["clear"]), tuple(b["encrypted"])) for w, b in blocks.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=12, help="blocks of each side")
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--workdir", default="var/bench-encryption")
    parser.add_argument("--out", default=str(results.RESULTS))
    args = parser.parse_args(argv)
    started, measured = time.time(), results.revision()
    scratch = ScratchDatabases(server_url())
    rows, record = [], {}
    try:
        for backend in args.stores.split(","):
            urls: list[str | None] = [None, None]
            if backend == "postgres":
                urls = [scratch.create("enc-clear"), scratch.create("enc-sealed")]
            found = measure(backend, Path(args.workdir).resolve(), urls, args.rounds)
            for workload, c in found.items():
                low, high = c.ratio_interval
                base, head = c.base * 1000, c.head * 1000
                rows.append(f"| {backend} | {workload} | {base:.3f} | {head:.3f} | "
                            f"{c.ratio:.2f} ({low:.2f}-{high:.2f}) |")  # fmt: skip
                record[f"{backend} {workload}"] = {
                    "unit": "s per call", "clear_s": c.base_blocks, "encrypted_s": c.head_blocks,
                    "ratio": c.ratio, "interval": [low, high],
                }  # fmt: skip
    finally:
        scratch.drop_all()
    table = "\n".join([
        f"Encryption at rest, A/B in one run ({args.rounds} rounds; time per call, medians "
        "of the blocks; ratio: the median of the rounds' encrypted / clear, 95% interval):",
        "", "| store | workload | clear ms | encrypted ms | encrypted / clear |",
        "|---|---|---|---|---|", *rows,
    ])  # fmt: skip
    print(table)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    document = {"command": " ".join(["python", "-m", "bench.encryption", *(argv or sys.argv[1:])]),
                "started": stamp, "revision": measured, "rounds": args.rounds,
                "comparisons": record, "table": table}  # fmt: skip
    for name in (f"encryption-{stamp}.json", "encryption-latest.json"):
        (out / name).write_text(json.dumps(document, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
