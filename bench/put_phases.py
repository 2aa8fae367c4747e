"""Where one put's time goes inside it: each phase of the write path timed in place.

Timed alone (timeit), each piece of a put costs two to four times less than it does
inside a put on this machine, where one put's code and data do not stay in the CPU's
caches. This wraps the phases of the real write path with a nanosecond clock, makes
single-message puts to one session, and reports each phase's time per put (phases
nest: `insert_events` holds the statements, `apply_changes` and the COMMIT).

On SQLite, raw sqlite3 (`make bench`'s anchor: one row and its commit) takes turns with
the ledger in blocks of puts, and the COMMIT of both is timed (mean and median): what a
put's commit costs beside raw's, and what the rest of a put costs around it.

Appends to a session the process holds take the short path on SQLite (and the memory
store); `--path general` sends every put through the general write path.

`python -m bench.put_phases [--store sqlite|memory] [--puts 3000] [--path short|general]
[--workdir DIR]` prints a Markdown table and writes
bench/results/put-phases-<store>-<path>-latest.json.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import random
import statistics
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.anchors.raw_sqlite import RawSQLite
from bench.blocks import in_turns
from bench.corpus import conversation
from bench.results import write_diagnostic
from bench.stores import Context

WARM_PUTS = 300  # not counted: the session's first snapshot and pages
BLOCK = 100  # puts a writer makes in its turn (SQLite: the ledger and raw sqlite3)
COMMIT = "COMMIT"
RAW_COMMIT = "raw sqlite3: its COMMIT"

# (where, attribute, phase): the write path's steps, outermost first. An append to a
# session the process holds takes the short path (`Ledger._append_rows`, the recorder's
# `append_rows`) on SQLite; `--path general` sends every put through `_write`.
SHORT_PHASES = (
    ("ledger", "_append_rows", "short path (all but parse and tokenize)"),
    ("recorder", "append_rows", "append_rows: BEGIN, statements, COMMIT"),
)
GENERAL_PHASES = (
    ("ledger", "_write", "write (all but parse and tokenize)"),
    ("ledger", "_save", "save: stored events, recorder, cache"),
    ("recorder", "insert_events", "insert_events: BEGIN, statements, COMMIT"),
    ("recorder", "apply_changes", "apply_changes: the view rows"),
    ("library_recorder", "_insert_events", "the event INSERT"),
    ("changes", "view_changes", "view_changes"),
    ("ledger", "_load", "load the session"),
)
COMMON_PHASES = (
    ("tokenizer", "count", "tokenize"),
    ("mapper", "to_stored_event", "the stored record"),
    ("session", "trigger_event", "trigger_event"),
    ("ledger", "_parse_messages", "parse"),
)
PATHS = {"short": SHORT_PHASES + COMMON_PHASES, "general": GENERAL_PHASES + COMMON_PHASES}


@contextlib.contextmanager
def timed(
    targets: dict[str, Any],
    spent: collections.Counter[str],
    phases: tuple[tuple[str, str, str], ...],
) -> Iterator[None]:
    """Each of `phases` wrapped to add its nanoseconds to `spent`; undone on exit."""
    undo: list[Callable[[], None]] = []
    clock = time.perf_counter_ns
    try:
        for where, name, phase in phases:
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


class TimedCommits:
    """A sqlite3 connection whose `commit` is timed (each call's ns kept); anything else
    is the connection's own."""

    def __init__(self, conn: Any) -> None:
        self._conn = conn
        self.ns: list[int] = []

    def commit(self) -> None:
        t0 = time.perf_counter_ns()
        try:
            self._conn.commit()
        finally:
            self.ns.append(time.perf_counter_ns() - t0)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)


@contextlib.contextmanager
def commits_timed(owner: Any, attribute: str) -> Iterator[TimedCommits]:
    """`owner.<attribute>` (a connection) with its commits timed; put back on exit."""
    conn = getattr(owner, attribute)
    timed_conn = TimedCommits(conn)
    setattr(owner, attribute, timed_conn)
    try:
        yield timed_conn
    finally:
        setattr(owner, attribute, conn)


def measure(store: str, puts: int, workdir: Path, path: str = "short") -> dict[str, Any]:
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
    if path == "general":
        ledger._appender = None  # every put through `_write`
    phases_timed = PATHS[path]
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
    raw = RawSQLite() if store == "sqlite" else None
    raw_message = conversation(1)[0]
    try:
        for m in messages[:WARM_PUTS]:
            ledger.put("s", m)
        feed = iter(messages[WARM_PUTS:])
        writers = {"ledger": lambda: ledger.put("s", next(feed))}
        with contextlib.ExitStack() as stack:
            if raw is not None:
                raw.open(Context(workdir=workdir, postgres_url=None, window_rows=1))
                stack.callback(raw.close)
                for _ in range(WARM_PUTS):
                    raw.append("r", raw_message)
                writers["raw"] = lambda: raw.append("r", raw_message)
                raw_commits = stack.enter_context(commits_timed(raw, "conn"))
                writer = ledger.recorder.datastore.pool._writer  # made by the warm-up puts
                ledger_commits = stack.enter_context(commits_timed(writer, "sqlite"))
            stack.enter_context(timed(targets, spent, phases_timed))
            blocks = in_turns(writers, max(1, puts // BLOCK), min(BLOCK, puts), random.Random())
    finally:
        ledger.close()
    made = len(blocks["ledger"]) * min(BLOCK, puts)
    phases = {phase: spent[phase] / made / 1000 for _, _, phase in phases_timed}
    result: dict[str, Any] = {
        "store": store,
        "path": path,
        "puts": made,
        "put_us": statistics.fmean(blocks["ledger"]),
        "phases_us": phases,
    }
    if raw is not None:
        for phase, ns in ((COMMIT, ledger_commits.ns), (RAW_COMMIT, raw_commits.ns)):
            phases[phase] = statistics.fmean(ns) / 1000
            result.setdefault("commit_median_us", {})[phase] = statistics.median(ns) / 1000
        result["raw_put_us"] = statistics.fmean(blocks["raw"])
    return result


def table(result: dict[str, Any]) -> str:
    total = result["put_us"]
    medians = result.get("commit_median_us", {})
    lines = [
        f"| phase ({result['store']}, {result['path']} path) | µs per put (mean) | of the put "
        "| median µs |",
        "|---|---|---|---|",
        f"| the whole put | {total:.0f} | 100% | |",
    ]
    for phase, us in result["phases_us"].items():
        if phase == RAW_COMMIT:
            continue
        median = f"{medians[phase]:.0f}" if phase in medians else ""
        lines.append(f"| {phase} | {us:.1f} | {100 * us / total:.1f}% | {median} |")
    if "raw_put_us" in result:
        raw, raw_commit = result["raw_put_us"], result["phases_us"][RAW_COMMIT]
        lines.append(f"| raw sqlite3: its whole put (in turns) | {raw:.0f} | | |")
        lines.append(
            f"| {RAW_COMMIT} | {raw_commit:.1f} | {100 * raw_commit / raw:.1f}% of raw's "
            f"| {medians[RAW_COMMIT]:.0f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--store", choices=("sqlite", "memory"), default="sqlite")
    parser.add_argument("--puts", type=int, default=3000)
    parser.add_argument("--path", choices=tuple(PATHS), default="short")
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="put-phases-", dir=args.workdir) as scratch:
        result = measure(args.store, args.puts, Path(scratch), args.path)
    print(
        f"{result['puts']} single-message puts to one session after {WARM_PUTS}, timed in "
        f"place, in blocks of {BLOCK}:\n"
    )
    print(table(result))
    write_diagnostic(f"put-phases-{args.store}-{args.path}-latest.json", result)


if __name__ == "__main__":
    main()
