"""Where one put's time goes inside it: each phase of the write path timed in place.

Timed alone (timeit), each piece of a put costs two to four times less than it does
inside a put on this machine, where one put's code and data do not stay in the CPU's
caches. This wraps the phases of the real write path with a nanosecond clock, makes
single-message puts to one session, and reports each phase's time per put (phases
nest: `insert_events` holds the statements, `apply_changes` and the COMMIT).

`python -m bench.put_phases [--store sqlite|memory] [--puts 3000]` prints a Markdown
table and writes bench/results/put-phases-<store>-latest.json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.corpus import conversation
from bench.results import write_diagnostic

WARM_PUTS = 300  # not counted: the session's first snapshot and pages

# (where, attribute, phase): the write path's steps, outermost first.
PHASES = (
    ("ledger", "_write", "write (all but parse and tokenize)"),
    ("ledger", "_save", "save: stored events, recorder, cache"),
    ("recorder", "insert_events", "insert_events: BEGIN, statements, COMMIT"),
    ("recorder", "apply_changes", "apply_changes: the view rows"),
    ("library_recorder", "_insert_events", "the event INSERT"),
    ("changes", "view_changes", "view_changes"),
    ("tokenizer", "count", "tokenize"),
    ("mapper", "to_stored_event", "the stored record"),
    ("session", "trigger_event", "trigger_event"),
    ("ledger", "_parse_messages", "parse"),
    ("ledger", "_load", "load the session"),
)


@contextlib.contextmanager
def timed(targets: dict[str, Any], spent: collections.Counter[str]) -> Iterator[None]:
    """Each phase of PHASES wrapped to add its nanoseconds to `spent`; undone on exit."""
    undo: list[Callable[[], None]] = []
    clock = time.perf_counter_ns
    try:
        for where, name, phase in PHASES:
            owner = targets[where]
            original = getattr(owner, name)

            def wrapper(*args: Any, _f: Any = original, _p: str = phase, **kw: Any) -> Any:
                t0 = clock()
                try:
                    return _f(*args, **kw)
                finally:
                    spent[_p] += clock() - t0

            own = name in vars(owner)  # else an instance shadows its class's method
            setattr(owner, name, wrapper)
            undo.append(
                (lambda o=owner, n=name, f=original: setattr(o, n, f))
                if own
                else (lambda o=owner, n=name: delattr(o, n))
            )
        yield
    finally:
        for step in reversed(undo):
            step()


def measure(store: str, puts: int, workdir: Path) -> dict[str, Any]:
    from eventsourcing.sqlite import SQLiteApplicationRecorder

    from session_ledger.api.bootstrap import migrate, open_ledger
    from session_ledger.api.settings import Settings
    from session_ledger.domain.messages import ChatMessage
    from session_ledger.domain.session import Session
    from session_ledger.domain.tokens import NamedTokenizer
    from session_ledger.projections import sqlite as sqlite_store

    url = "memory://" if store == "memory" else f"sqlite:///{workdir / 'ledger.db'}"
    settings = Settings(database_url=url, token_limit=4000)
    if store != "memory":
        migrate(settings)
    ledger = open_ledger(settings)
    messages = [ChatMessage.text(m["role"], m["content"]) for m in conversation(WARM_PUTS + puts)]
    targets = {
        "ledger": ledger,
        "recorder": ledger.recorder,
        "library_recorder": SQLiteApplicationRecorder,
        "changes": sqlite_store,
        "tokenizer": NamedTokenizer,
        "mapper": ledger.mapper,
        "session": Session,
    }
    spent: collections.Counter[str] = collections.Counter()
    try:
        for m in messages[:WARM_PUTS]:
            ledger.put("s", m)
        with timed(targets, spent):
            t0 = time.perf_counter_ns()
            for m in messages[WARM_PUTS:]:
                ledger.put("s", m)
            total = (time.perf_counter_ns() - t0) / puts / 1000
    finally:
        ledger.close()
    phases = {phase: spent[phase] / puts / 1000 for _, _, phase in PHASES}
    return {"store": store, "puts": puts, "put_us": total, "phases_us": phases}


def table(result: dict[str, Any]) -> str:
    total = result["put_us"]
    lines = [f"| phase ({result['store']}) | µs per put | of the put |", "|---|---|---|"]
    lines.append(f"| the whole put | {total:.0f} | 100% |")
    for phase, us in result["phases_us"].items():
        lines.append(f"| {phase} | {us:.1f} | {100 * us / total:.1f}% |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--puts", type=int, default=3000)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="put-phases-", dir=args.workdir) as scratch:
        result = measure(args.store, args.puts, Path(scratch))
    print(f"{args.puts} single-message puts to one session after {WARM_PUTS}, timed in place:\n")
    print(table(result))
    write_diagnostic(f"put-phases-{args.store}-latest.json", result)


if __name__ == "__main__":
    main()
