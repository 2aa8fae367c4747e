"""Instructions per single-message write, counted by callgrind, for the ledger's put and
each peer's, in one run: the measure of a write path's cost that the machine's load does
not move (wall-clock timings here swing by a third).

Each subject runs twice under `valgrind --tool=callgrind` in a process of its own, on a
SQLite file in /dev/shm (no fsync to wait for): once writing WARM messages to one
session, once writing WARM + N. The difference of the two totals over N is one write;
the process's start-up, the imports and the first writes (which make the tables and the
session) cancel out. PYTHONHASHSEED is fixed in the children so the two runs of a subject
start alike.

Subjects, each the call a user of that system makes to store one message:
- `ledger`: session-ledger's `Ledger.put` (bench/ledger.py, the store `make bench` drives);
- `raw-sqlite3`: one INSERT of the message's JSON and a commit (bench/anchors/raw_sqlite.py);
- `es-eventstore-put`: eventsourcing, an aggregate's event made and `EventStore.put`;
- `es-application-save`: eventsourcing, the same event made and `Application.save`;
- `agents-sqlitesession`: OpenAI Agents `SQLiteSession.add_items` of one item;
- `ledger-session`: the same call on session-ledger's `LedgerSession`, over the `ledger`
  subject's store (its put, and what the adapter adds to it);
- `llamaindex-sqlite`: LlamaIndex `SQLiteChatStore.add_message`.

`python -m bench.instructions [--writes 300] [--jobs 2] [--only ledger ...]` prints a
Markdown table and writes bench/results/instructions-latest.json (`make bench-instructions`).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from bench.corpus import Message, conversation
from bench.results import write_diagnostic

ROOT = Path(__file__).resolve().parent.parent  # the project's tree
WARM = 200  # writes in both runs: the tables, the session, the first pages, the caches
SCRATCH = Path("/dev/shm") if Path("/dev/shm").is_dir() else None


def _ledger(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    from bench.ledger import LedgerStore
    from bench.stores import Context

    store = LedgerStore("sqlite")
    store.open(Context(workdir, None, 58))
    return lambda m: store.append("s", m), store.close


def _raw_sqlite(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    from bench.anchors.raw_sqlite import RawSQLite
    from bench.stores import Context

    store = RawSQLite()
    store.open(Context(workdir, None, 58))
    return lambda m: store.append("s", m), store.close


def _conversation_class() -> Any:
    """An eventsourcing aggregate of one event type, defined once per process (the
    library registers each class by its topic)."""
    global _CONVERSATION
    if _CONVERSATION is None:
        from eventsourcing.domain import Aggregate, event

        class Conversation(Aggregate):
            @event("MessageAdded")
            def add(self, role: str, content: str) -> None:
                self.count = getattr(self, "count", 0) + 1

        _CONVERSATION = Conversation
    return _CONVERSATION


_CONVERSATION: Any = None


def _es_app(workdir: Path) -> Any:
    from eventsourcing.application import Application

    Conversation = _conversation_class()
    env = {"PERSISTENCE_MODULE": "eventsourcing.sqlite",
           "SQLITE_DBNAME": str(workdir / "eventsourcing.db")}  # fmt: skip
    app: Application = Application(env=env)
    aggregate = Conversation()
    app.save(aggregate)
    return app, aggregate


def _es_put(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    app, aggregate = _es_app(workdir)

    def put(m: Message) -> None:
        aggregate.add(m["role"], m["content"])
        app.events.put(aggregate.collect_events())

    return put, app.close


def _es_save(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    app, aggregate = _es_app(workdir)

    def save(m: Message) -> None:
        aggregate.add(m["role"], m["content"])
        app.save(aggregate)

    return save, app.close


def _agents(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    from agents.memory import SQLiteSession

    session = SQLiteSession("s", str(workdir / "openai-agents.db"))
    loop = asyncio.new_event_loop()

    def close() -> None:
        session.close()
        loop.close()

    return lambda m: loop.run_until_complete(session.add_items([dict(m)])), close  # type: ignore[list-item]


def _ledger_session(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    from bench.ledger import LedgerStore
    from bench.stores import Context
    from session_ledger.api.openai_agents import LedgerSession

    store = LedgerStore("sqlite")
    store.open(Context(workdir, None, 58))
    session = LedgerSession("s", ledger=store.ledger)
    loop = asyncio.new_event_loop()

    def close() -> None:
        loop.close()
        store.close()

    return lambda m: loop.run_until_complete(session.add_items([dict(m)])), close  # type: ignore[list-item]


def _llamaindex(workdir: Path) -> tuple[Callable[[Message], None], Callable[[], None]]:
    from llama_index.core.llms import ChatMessage
    from llama_index.storage.chat_store.sqlite import SQLiteChatStore

    store = SQLiteChatStore.from_params(database=str(workdir / "llamaindex.db"))

    def add(m: Message) -> None:
        store.add_message("s", ChatMessage(role=m["role"], content=m["content"]))

    return add, lambda: None


SUBJECTS: dict[str, tuple[str, Callable[[Path], Any]]] = {
    "ledger": ("session-ledger Ledger.put", _ledger),
    "raw-sqlite3": ("raw sqlite3 INSERT + COMMIT", _raw_sqlite),
    "es-eventstore-put": ("eventsourcing EventStore.put (one event)", _es_put),
    "es-application-save": ("eventsourcing Application.save (one event)", _es_save),
    "agents-sqlitesession": ("OpenAI Agents SQLiteSession.add_items", _agents),
    "ledger-session": ("session-ledger LedgerSession.add_items", _ledger_session),
    "llamaindex-sqlite": ("LlamaIndex SQLiteChatStore.add_message", _llamaindex),
}


def worker(subject: str, writes: int, made: int) -> None:
    """In the measured process: WARM + `writes` writes of one subject, then close. Both
    runs of a subject make the same `made` messages (the ledger's in its own type)
    before they write, so that making them is no part of the difference."""
    messages = conversation(made)
    workdir = Path(tempfile.mkdtemp(prefix="instructions-", dir=SCRATCH))
    try:
        write, close = SUBJECTS[subject][1](workdir)
        if subject == "ledger":  # its ChatMessage, as the store `make bench` drives makes it
            from session_ledger.domain.messages import ChatMessage

            messages = [ChatMessage.text(m["role"], m["content"]) for m in messages]  # type: ignore[misc]
        for message in messages[: WARM + writes]:
            write(message)
        close()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def compiled() -> None:
    """The project's modules compiled before a measured process starts: processes that
    find a changed module's .pyc stale each compile it, and race to write it, so the
    compile fell in one run of a subject and not the other (a put measured 710k right
    after edits, 698k with every .pyc current). Imported here, not by the measured
    processes: a module more in their heap makes each full collection of the garbage
    collector cost more (6.5k a put for this one)."""
    import compileall

    for folder in ("domain", "projections", "api", "bench"):
        compileall.compile_dir(ROOT / folder, quiet=1)


def callgrind_total(name: str, module: str, args: list[str], env: dict[str, str]) -> int:
    """Callgrind's total instructions (Ir) of one `python -m module *args` process, with
    `env` as its whole environment (`name`: what a failure names), the project's modules
    compiled first (`compiled`)."""
    compiled()
    with tempfile.TemporaryDirectory(dir=SCRATCH) as out:
        target = Path(out) / "callgrind.out"
        done = subprocess.run(
            ["valgrind", "--tool=callgrind", f"--callgrind-out-file={target}",
             sys.executable, "-m", module, *args],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"{name} failed under callgrind:\n{done.stderr[-3000:]}")
        totals = re.search(r"^totals: (\d+)", target.read_text(errors="replace"), re.M)
        if totals is None:
            raise RuntimeError(f"no totals in callgrind's output for {name}")
        return int(totals.group(1))


def count(subject: str, writes: int, made: int) -> int:
    """The instructions (Ir) of one process of `subject` doing WARM + `writes` writes."""
    env = {**os.environ, "PYTHONHASHSEED": "0"}
    args = ["--worker", subject, str(writes), str(made)]
    return callgrind_total(subject, "bench.instructions", args, env)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=300, help="measured writes (N)")
    parser.add_argument("--jobs", type=int, default=2, help="callgrind processes at once")
    parser.add_argument("--only", nargs="*", choices=sorted(SUBJECTS), default=None)
    parser.add_argument("--worker", nargs=3, help=argparse.SUPPRESS)  # subject, writes, made
    args = parser.parse_args()
    if args.worker:
        worker(args.worker[0], int(args.worker[1]), int(args.worker[2]))
        return
    if shutil.which("valgrind") is None:
        sys.exit("valgrind is needed (apt-get install valgrind)")
    subjects = args.only or list(SUBJECTS)
    started = time.monotonic()
    runs = [(s, n) for s in subjects for n in (0, args.writes)]
    with ThreadPoolExecutor(args.jobs) as pool:
        made = WARM + args.writes
        totals = dict(zip(runs, pool.map(lambda run: count(*run, made), runs), strict=True))
    per_write = {s: (totals[s, args.writes] - totals[s, 0]) / args.writes for s in subjects}
    ledger = per_write.get("ledger")
    print(f"Instructions per single-message write (callgrind; SQLite in /dev/shm; "
          f"({WARM} + {args.writes} writes) - ({WARM} writes), over {args.writes}):\n")  # fmt: skip
    print("| subject | instructions per write | the ledger's put / it |")
    print("|---|---|---|")
    for s in subjects:
        ratio = f"{ledger / per_write[s]:.2f}x" if ledger and per_write[s] > 0 else ""
        print(f"| {SUBJECTS[s][0]} | {per_write[s] / 1000:,.0f}k | {ratio} |")
    print(f"\n({time.monotonic() - started:.0f} s)")
    fields = {
        "warm_writes": WARM,
        "writes": args.writes,
        "instructions_per_write": {s: round(per_write[s]) for s in subjects},
        "totals": {
            s: {"warm": totals[s, 0], "warm_plus_writes": totals[s, args.writes]} for s in subjects
        },
        "python": sys.version.split()[0],
    }
    if args.only is None:
        print(f"written: {write_diagnostic('instructions-latest.json', fields)}")
    else:
        print(json.dumps(fields["instructions_per_write"]))


if __name__ == "__main__":
    main()
