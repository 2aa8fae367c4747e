"""Two processes taking turns at one session, in-process: two Ledgers on one store (each
with its own cache, as two API workers behind a balancer have), alternating their puts,
beside one Ledger making the same puts alone (docs/performance.md).

Each of the two caches is one write behind at every turn: the put's save fails on its
version, and the write loop catches the cached copy up with the events written since.

`python -m bench.diagnostics.alternating_writers [--puts 300] [--stores sqlite,postgres]`
prints a Markdown table and writes bench/results/alternating-writers-latest.json.
"""

from __future__ import annotations

import argparse
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bench.postgres import scratch_database
from bench.results import scratch_dir, write_diagnostic
from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.messages import ChatMessage


@contextmanager
def store_url(store: str) -> Iterator[str]:
    if store == "sqlite":
        folder = scratch_dir("alternating-")
        try:
            yield f"sqlite:///{folder / 'ledger.db'}"
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        with scratch_database("alternating") as url:
            yield url


def µs_a_put(url: str, writers: int, puts: int) -> float:
    settings = Settings(database_url=url, tokenizer="whitespace")
    migrate(settings)
    ledgers = [open_ledger(settings) for _ in range(writers)]
    try:
        for n, ledger in enumerate(ledgers):  # each has seen the session once
            ledger.put("shared", ChatMessage.text("user", f"warm {n}"))
        started = time.perf_counter()
        for i in range(puts):
            ledgers[i % writers].put("shared", ChatMessage.text("user", f"turn {i}"))
        return (time.perf_counter() - started) / puts * 1e6
    finally:
        for ledger in ledgers:
            ledger.close()


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--puts", type=int, default=300)
    parser.add_argument("--stores", default="sqlite,postgres")
    args = parser.parse_args(argv)
    rows = []
    for store in args.stores.split(","):
        figures = {}
        for writers in (1, 2):
            with store_url(store) as url:
                figures[writers] = µs_a_put(url, writers, args.puts)
        rows.append({"store": store, "alone_us": figures[1], "alternating_us": figures[2]})
    print("| store | one writer, µs a put | two taking turns, µs a put | ratio |")
    print("|---|---|---|---|")
    for row in rows:
        ratio = row["alternating_us"] / row["alone_us"]
        print(f"| {row['store']} | {row['alone_us']:,.0f} | {row['alternating_us']:,.0f} | "
              f"{ratio:.2f}x |")  # fmt: skip
    path = write_diagnostic("alternating-writers-latest.json", {"puts": args.puts, "rows": rows})
    print(f"\nwrote {path}")
    return {"rows": rows}


if __name__ == "__main__":
    main()
