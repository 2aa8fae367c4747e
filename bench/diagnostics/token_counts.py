"""How fast cl100k_base counts a message: the `bpe` crate (bpe-openai, what the ledger
uses) against tiktoken (what LlamaIndex encodes with), on texts of the size of the
largest message (4 MiB): one run of spaces, one run of one letter (each a single
pre-token, tiktoken's worst case) and ordinary prose (the project's docs, repeated).

Each cell is the best of `--rounds` of one count (characters a second), and of a
message's two stored counts (`NamedTokenizer.count`: alone, and after the joining
space). The counts are checked equal first.

`python -m bench.diagnostics.token_counts [--mib 4] [--rounds 3]` prints a Markdown
table and writes bench/results/token-counts-latest.json.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path

from bench.results import write_diagnostic
from session_ledger.domain import cl100k
from session_ledger.domain.tokens import NamedTokenizer


def texts(size: int) -> dict[str, str]:
    prose = "\n\n".join(path.read_text() for path in sorted(Path("docs").glob("*.md")))
    return {
        "spaces": " " * size,
        "one letter": "x" * size,
        "prose": (prose * (size // len(prose) + 1))[:size],
    }


def best(call: Callable[[], object], rounds: int) -> float:
    times = []
    for _ in range(rounds):
        started = time.perf_counter()
        call()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mib", type=int, default=4)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    encoding = cl100k.tiktoken_encoding()

    def tiktoken_count(text: str) -> int:
        return len(encoding.encode(text, allowed_special="all"))

    counters = {"bpe crate": cl100k.counter(), "tiktoken": tiktoken_count}
    rows = []
    for name, text in texts(args.mib * 1024 * 1024).items():
        counts = {label: count(text) for label, count in counters.items()}
        assert len(set(counts.values())) == 1, (name, counts)
        for label, count in counters.items():
            message = NamedTokenizer("cl100k_base", cl100k.encode, True, length=count)
            one = best(lambda: count(text), args.rounds)  # noqa: B023
            both = best(lambda: message.count(text), args.rounds)  # noqa: B023
            rows.append({"text": name, "counter": label, "chars": len(text),
                         "tokens": counts[label], "count_s": one, "message_s": both,
                         "chars_per_s": len(text) / one})  # fmt: skip
    print("| text | counter | tokens | one count | chars/s | a message's two counts |")
    print("|---|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['text']} | {row['counter']} | {row['tokens']:,} | "
              f"{row['count_s'] * 1000:,.0f} ms | {row['chars_per_s'] / 1e6:,.1f} M | "
              f"{row['message_s'] * 1000:,.0f} ms |")  # fmt: skip
    command = f"python -m bench.diagnostics.token_counts --mib {args.mib} --rounds {args.rounds}"
    path = write_diagnostic("token-counts-latest.json", {"command": command, "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
