"""One side of an A/B run (bench/ab.py): a long-lived process measuring one revision.

Started as `python -m bench.ab_worker` with a directory first on PYTHONPATH that maps
`session_ledger` to that revision's tree, it imports `session_ledger`'s subpackages from
there (and says from where, so the parent can check), then answers one JSON request per
line on stdin with one JSON line on stdout. It drives the revision only through
`bench.ledger.LedgerStore`, the public API (`migrate`, `open_ledger`, `put`, `get`,
`get_all`), so the two revisions may lay out their insides differently.

Requests: {"op": "open", "store", "workdir", "postgres_url", "history", "w1_messages"}
makes a store (a SQLite file in `workdir`, or the PostgreSQL database at the URL) and
loads its read history; {"op": "block", "store", "workload", "calls"} times that many
calls and answers each call's µs; {"op": "close", "store"}; {"op": "quit"}.
"""

from __future__ import annotations

import gc
import importlib
import itertools
import json
import os
import pkgutil
import sys
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from bench.corpus import conversation
from bench.ledger import LedgerStore
from bench.stores import Context

HISTORY = "history"  # the session W3 and W4 read
W1 = "w1"  # the session W1 appends to
OPS = ("open", "block", "close")


class Worker:
    def __init__(self) -> None:
        self.stores: dict[str, LedgerStore] = {}
        self.w1: dict[str, list[Any]] = {}  # the messages W1 has still to append
        self.history: dict[str, int] = {}
        self.w0: dict[str, Any] = {}  # the message each W0 put starts its session with
        self.started = itertools.count()  # the sessions W0 has started

    def open(
        self, store: str, workdir: str, postgres_url: str | None, history: int, w1_messages: int
    ) -> dict[str, Any]:
        ledger = LedgerStore(store)
        ledger.open(Context(Path(workdir), postgres_url, window_rows=1))
        messages = conversation(max(history, w1_messages))
        try:
            natives = [ledger.native(m) for m in messages]
            handed = "ChatMessage"
        except (ImportError, AttributeError):  # a revision without that message class
            natives, handed = list(messages), "dict"
        t0 = time.perf_counter()
        if history:
            ledger.load(HISTORY, natives[:history])
        self.stores[store] = ledger
        self.w1[store] = natives[:w1_messages][::-1]  # popped from the end
        self.w0[store] = natives[0]
        self.history[store] = history
        # What the harness holds so far is frozen, as `make bench` does: a full collection
        # must not walk the corpus and the history on either side's clock.
        gc.collect()
        gc.freeze()
        return {"messages": handed, "load_s": time.perf_counter() - t0}

    def call(self, store: str, workload: str) -> Callable[[], object]:
        if store not in self.stores:
            raise ValueError(f"no {store} store is open")
        ledger = self.stores[store]
        if workload == "W1":
            pending = self.w1[store]
            return lambda: ledger.append(W1, pending.pop())
        if workload == "W0":  # each put starts a session of its own
            message = self.w0[store]
            return lambda: ledger.append(f"w0-{next(self.started)}", message)
        if workload == "W3":
            return lambda: ledger.window(HISTORY)
        if workload == "W4":
            expect = self.history[store]

            def history() -> int:
                count = ledger.history(HISTORY)
                if count != expect:
                    raise AssertionError(f"W4 read {count} messages, expected {expect}")
                return count

            return history
        raise ValueError(f"unknown workload {workload!r}")

    def block(self, store: str, workload: str, calls: int) -> dict[str, Any]:
        call = self.call(store, workload)
        clock = time.perf_counter_ns
        us = []
        for _ in range(calls):
            t0 = clock()
            call()
            us.append((clock() - t0) / 1000)
        return {"us": us}

    def close(self, store: str) -> dict[str, Any]:
        self.stores.pop(store).close()
        return {}


def imported_from() -> dict[str, str]:
    """Where each subpackage of `session_ledger` was imported from (real paths)."""
    import session_ledger

    out = {}
    for module in pkgutil.iter_modules(session_ledger.__path__, "session_ledger."):
        file = importlib.import_module(module.name).__file__
        out[module.name] = os.path.realpath(file) if file else ""
    return out


def serve(requests: TextIO, answers: TextIO) -> None:
    say(answers, {"ok": True, "imported_from": imported_from()})
    worker = Worker()
    for line in requests:
        request = json.loads(line)
        op = request.pop("op")
        if op == "quit":
            break
        try:
            if op not in OPS:
                raise ValueError(f"unknown request {op!r}")
            answer = {"ok": True, **getattr(worker, op)(**request)}
        except Exception:
            answer = {"ok": False, "error": traceback.format_exc()}
        say(answers, answer)
    for store in list(worker.stores):
        worker.close(store)


def say(answers: TextIO, answer: dict[str, Any]) -> None:
    answers.write(json.dumps(answer) + "\n")
    answers.flush()


def main() -> None:
    # The answers keep stdout to themselves: anything the code under test prints goes
    # to stderr, which the parent passes through.
    answers = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    serve(sys.stdin, answers)


if __name__ == "__main__":
    main()
