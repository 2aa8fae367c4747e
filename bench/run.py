"""Entry point: `python -m bench.run [--quick]` runs every workload against every store.

One process run: session-ledger (memory, SQLite, PostgreSQL) and the anchors
(raw sqlite3, raw psycopg, the LlamaIndex stores, OpenAI Agents' SQLiteSession),
repeated; prints Markdown tables of medians and of the issue's targets (ratios
taken pair by pair within each repetition) and writes JSON to bench/results/.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import dataclasses
import gc
import importlib.util
import os
import random
import re
import shlex
import shutil
import sys
import time
import traceback
from collections.abc import Callable, Iterator
from pathlib import Path

from . import corpus, http_api, results
from .export import ExportBench, export_table
from .postgres import ScratchDatabases, server_url
from .report import Cells, encryption_table, http_table, judge, tables, targets
from .stores import Context, Store
from .workloads import (
    WRITERS,
    Cell,
    ParallelRun,
    ReadRun,
    Run,
    SequenceRun,
    predict_read,
    take_turns,
)


@dataclasses.dataclass(frozen=True)
class Plan:
    reps: int
    w1_messages: int
    w2_sessions: int
    w2_messages: int
    w3_sizes: tuple[int, ...]
    w3_ours_only: tuple[int, ...]  # sizes only session-ledger is loaded with
    w4_size: int
    write_budget_s: float  # per write cell and repetition
    read_budget_s: float  # a read cell predicted to take longer is not run
    read_spend_s: float  # how long a fast read is repeated for its median
    w6_requests: int  # HTTP requests per W6 cell
    w5_messages: int = 10_000  # W5's history, written W5_PER_WRITE messages at a time


W5_PER_WRITE = 10  # so a 10,000-message history has 1,000 versions to go back to
WRITE_ROUNDS = 10  # turns each store takes at a write workload (200 of W1's 2,000 calls)
READ_ROUNDS = 5  # turns each store takes at a read workload


FULL = Plan(3, 2000, 100, 50, (100, 1000, 10_000), (100_000,), 10_000, 60.0, 30.0, 1.0, 2000)
QUICK = Plan(1, 1000, 50, 20, (100, 1000, 10_000), (), 10_000, 15.0, 10.0, 0.3, 300)


def _raiser(exc: Exception) -> Callable[[], Cell]:
    """A measurement that raises `exc` again, for `Runner.guarded` to record."""

    def again() -> Cell:
        raise exc

    return again


def log(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def factories(with_postgres: bool) -> list[Callable[[], Store]]:
    from .anchors.llamaindex_buffer import LlamaPostgres, LlamaSimple, LlamaSQLite
    from .anchors.llamaindex_memory import LlamaMemory
    from .anchors.openai_agents import AgentsSQLite
    from .anchors.raw_postgres import RawPostgres
    from .anchors.raw_sqlite import RawSQLite
    from .ledger import LedgerStore

    # Run order puts each of our stores next to the raw database it is compared with,
    # so a pair shares the machine's state as far as possible (others share it too).
    out: list[Callable[[], Store]] = []
    ours = importlib.util.find_spec("session_ledger.api.bootstrap") is not None
    if not ours:
        log("session_ledger.api.bootstrap not found: measuring the anchors only")
    if ours:
        out.append(lambda: LedgerStore("sqlite"))
        out.append(lambda: LedgerStore("sqlite", encrypted=True))
    out.append(RawSQLite)
    if with_postgres:
        if ours:
            out.append(lambda: LedgerStore("postgres"))
            out.append(lambda: LedgerStore("postgres", encrypted=True))
        out.append(RawPostgres)
    if ours:
        out.append(lambda: LedgerStore("memory"))
    out += [LlamaSimple, LlamaSQLite]
    if with_postgres:
        out.append(LlamaPostgres)
    out += [LlamaMemory, AgentsSQLite]
    return out


class Runner:
    def __init__(self, plan: Plan, workdir: Path, scratch: ScratchDatabases | None) -> None:
        self.plan = plan
        self.workdir = workdir
        self.scratch = scratch
        biggest = max(plan.w3_sizes + plan.w3_ours_only + (plan.w4_size,))
        self.messages = corpus.conversation(max(biggest, plan.w1_messages, plan.w2_messages))
        self.window_rows = corpus.window_size(self.messages[: plan.w4_size])
        self.cells: Cells = {}
        self.load_averages: list[float] = []
        self.w5_heads: dict[str, int] = {}  # store -> the last version of its W5 history

    @contextlib.contextmanager
    def opened(self, factory: Callable[[], Store], tag: str) -> Iterator[Store]:
        store = factory()
        slug = re.sub(r"[^a-z0-9]+", "-", store.name.lower()).strip("-")
        workdir = self.workdir / f"{slug}-{tag}"
        shutil.rmtree(workdir, ignore_errors=True)
        workdir.mkdir(parents=True)
        url = None
        if store.backend == "postgres":
            assert self.scratch is not None
            url = self.scratch.create(tag)
        store.open(Context(workdir, url, self.window_rows))
        try:
            yield store
        finally:
            store.close()
            if url is not None and self.scratch is not None:
                self.scratch.drop(url)
            shutil.rmtree(workdir, ignore_errors=True)

    def record(self, name: str, workload: str, cell: Cell) -> None:
        self.cells.setdefault(name, {}).setdefault(workload, []).append(cell)
        shown = cell.best()
        text = "—" if shown is None else f"{shown:,.3f}"
        log(f"  {name:42} {workload:10} {text:>14} {cell.unit} {cell.note}")

    def guarded(self, store: Store, workload: str, measure: Callable[[], Cell]) -> None:
        try:
            cell = measure()
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            cell = Cell(
                "ms" if workload.startswith(("W3", "W4", "W5")) else "msg/s",
                note=f"error: {type(exc).__name__}: {exc}"[:300],
            )
        self.record(store.name, workload, cell)

    def earlier_prediction(self, store: Store, workload: str) -> Cell | None:
        """A write cell that passed its budget once is predicted again, not rerun."""
        for cell in self.cells.get(store.name, {}).get(workload, []):
            if cell.value is None and cell.predicted is not None:
                return Cell(cell.unit, predicted=cell.predicted, note="predicted in repetition 1")
        return None

    @staticmethod
    def settle() -> None:
        """Freeze what the harness holds so far (the corpus, the other stores' data).

        Otherwise a store that allocates many objects per call pays for full garbage
        collections over everything else this one process keeps alive: a cost set by
        the harness, not by the store.
        """
        gc.collect()
        gc.freeze()

    def measured_in_turns(self, workload: str, runs: list[tuple[Store, Run]], rounds: int) -> None:
        """Run `workload` on several stores taking turns (workloads.take_turns), and record
        each store's cell, or the error its run stopped on."""
        self.settle()
        take_turns([run for _, run in runs], rounds)
        for store, run in runs:
            self.guarded(store, workload, run.cell if run.error is None else _raiser(run.error))

    def writes(
        self, stores: list[tuple[Store, list[object]]], rep: int, workloads: set[str]
    ) -> None:
        p = self.plan
        budget = p.write_budget_s
        for workload in ("W1", "W1x4", "W2"):
            if workload not in workloads:
                continue
            runs: list[tuple[Store, Run]] = []
            for store, natives in stores:
                if workload == "W1x4" and not store.concurrent:
                    continue
                predicted = self.earlier_prediction(store, workload)
                if predicted is not None:
                    self.record(store.name, workload, predicted)
                    continue
                runs.append((store, self.write_run(workload, store, natives, rep, budget)))
            self.measured_in_turns(workload, runs, WRITE_ROUNDS)

    def write_run(
        self, workload: str, store: Store, natives: list[object], rep: int, budget: float
    ) -> Run:
        p = self.plan
        if workload == "W1":
            calls = [(f"w1-{rep}", m) for m in natives[: p.w1_messages]]
            return SequenceRun(store, calls, budget)
        if workload == "W1x4":
            share = p.w1_messages // WRITERS
            per_writer = [
                [(f"w1x4-{rep}-{t}", m) for m in natives[t * share : (t + 1) * share]]
                for t in range(WRITERS)
            ]
            return ParallelRun(store, per_writer, budget)
        calls = [
            (f"w2-{rep}-{s}", natives[i])
            for i in range(p.w2_messages)
            for s in range(p.w2_sessions)
        ]
        return SequenceRun(store, calls, budget)

    def reads(self, stores: list[tuple[Store, list[int]]]) -> None:
        p = self.plan
        sizes = sorted({size for _, store_sizes in stores for size in store_sizes})
        for size in sizes:
            workload = f"W3@{size}"
            runs: list[tuple[Store, Run]] = []
            for store, store_sizes in stores:
                if size not in store_sizes:
                    continue
                measured = [
                    (s, cell.value)
                    for s in store_sizes
                    if s < size
                    for cell in self.cells.get(store.name, {}).get(f"W3@{s}", [])[-1:]
                    if cell.value is not None
                ]
                predicted = predict_read(measured, size)
                if predicted is not None and predicted / 1000 > p.read_budget_s:
                    note = f"predicted {predicted / 1000:,.0f} s"
                    self.record(store.name, workload, Cell("ms", predicted=predicted, note=note))
                    continue
                read = ReadRun(
                    lambda store=store, s=size: store.window(f"w3-{s}"),
                    p.read_budget_s,
                    p.read_spend_s,
                )
                runs.append((store, read))
            self.measured_in_turns(workload, runs, READ_ROUNDS)
        history = [
            (
                store,
                ReadRun(
                    lambda store=store: store.history(f"w3-{p.w4_size}"),
                    p.read_budget_s,
                    p.read_spend_s,
                    expect=p.w4_size,
                ),
            )
            for store, _ in stores
        ]
        self.measured_in_turns(f"W4@{p.w4_size}", history, READ_ROUNDS)

    def point_in_time(self, stores: list[Store], rep: int) -> None:
        """W5: window and history at a random past version, a new version every call."""
        for workload, method in (("W5 window@v", "window_at"), ("W5 history@v", "history_at")):
            runs: list[tuple[Store, Run]] = []
            for store in stores:
                head = self.w5_heads[store.name]
                rng = random.Random(rep)
                read = getattr(store, method)
                runs.append(
                    (
                        store,
                        ReadRun(
                            lambda read=read, rng=rng, head=head: read("w5", rng.randint(1, head)),
                            self.plan.read_budget_s,
                            self.plan.read_spend_s,
                        ),
                    )
                )
            self.measured_in_turns(workload, runs, READ_ROUNDS)

    def run(self, chosen: list[Callable[[], Store]], workloads: set[str]) -> None:
        p = self.plan
        with contextlib.ExitStack() as readers:
            read_stores: list[tuple[Store, list[int]]] = []
            if workloads & {"W3", "W4", "W5"}:
                for factory in chosen:
                    store = readers.enter_context(self.opened(factory, "r"))
                    sizes = list(p.w3_sizes) + (
                        list(p.w3_ours_only) if store.group == "ours" else []
                    )
                    natives = [store.native(m) for m in self.messages[: max(sizes)]]
                    t0 = time.perf_counter()
                    for size in sizes:
                        store.load(f"w3-{size}", natives[:size])
                    if "W5" in workloads and store.keeps_versions:
                        self.w5_heads[store.name] = store.load_versions(
                            "w5", natives[: p.w5_messages], W5_PER_WRITE
                        )
                    log(f"loaded {store.name}: {sizes} in {time.perf_counter() - t0:.1f} s")
                    read_stores.append((store, sizes))
            servers = self.servers(readers) if "W6" in workloads else []
            exporters = self.exporters(readers) if "W7" in workloads else []
            for rep in range(p.reps):
                # Other work on the machine moves every figure: keep the load with them.
                self.load_averages.append(os.getloadavg()[0])
                log(f"repetition {rep + 1}/{p.reps} (load average {self.load_averages[-1]:.1f})")
                if workloads & {"W1", "W1x4", "W2"}:
                    # Every store of the repetition is open at once: they take turns.
                    with contextlib.ExitStack() as writers:
                        stores = []
                        for factory in chosen:
                            store = writers.enter_context(self.opened(factory, f"w{rep}"))
                            natives = [
                                store.native(m)
                                for m in self.messages[: max(p.w1_messages, p.w2_messages)]
                            ]
                            stores.append((store, natives))
                        self.writes(stores, rep, workloads)
                if workloads & {"W3", "W4"}:
                    self.reads(read_stores)
                if self.w5_heads:
                    self.point_in_time(
                        [store for store, _ in read_stores if store.name in self.w5_heads], rep
                    )
                for name, server in servers:
                    try:
                        cells = http_api.measure(
                            server, rep, self.messages[:100], p.w6_requests, p.write_budget_s
                        )
                    except Exception as exc:
                        traceback.print_exc(file=sys.stderr)
                        cells = {"W6": Cell("req/s", note=f"error: {exc}"[:300])}
                    for workload, cell in cells.items():
                        self.record(name, workload, cell)
                for name, exporter in exporters:
                    self.settle()
                    try:
                        cells = exporter.measure()
                    except Exception as exc:
                        traceback.print_exc(file=sys.stderr)
                        cells = {"W7 export library": Cell("events/s", note=f"error: {exc}"[:300])}
                    for workload, cell in cells.items():
                        self.record(name, workload, cell)

    def scratch_stores(
        self, stack: contextlib.ExitStack, purpose: str
    ) -> Iterator[tuple[str, Path, str]]:
        """(backend, work directory, database URL) of a fresh SQLite file and, when a
        server is there, a fresh PostgreSQL database; both removed when `stack` closes."""
        for backend in ("sqlite", "postgres") if self.scratch else ("sqlite",):
            workdir = self.workdir / f"{purpose}-{backend}"
            shutil.rmtree(workdir, ignore_errors=True)
            workdir.mkdir(parents=True)
            stack.callback(shutil.rmtree, workdir, ignore_errors=True)
            if backend == "sqlite":
                url = f"sqlite:///{workdir / 'ledger.db'}"
            else:
                assert self.scratch is not None
                url = self.scratch.create(purpose)
                stack.callback(self.scratch.drop, url)
            yield backend, workdir, url

    def exporters(self, stack: contextlib.ExitStack) -> list[tuple[str, ExportBench]]:
        """W7: a 10,000-event session on SQLite and PostgreSQL, each with a server on it."""
        if importlib.util.find_spec("session_ledger.projections.export") is None:
            return []
        out = []
        for backend, workdir, url in self.scratch_stores(stack, "export"):
            exporter = ExportBench(backend, url, workdir)
            t0 = time.perf_counter()
            exporter.load(self.messages)
            stack.callback(exporter.close)
            exporter.start_server()
            log(f"loaded W7 session-ledger {backend}: {time.perf_counter() - t0:.1f} s")
            out.append((f"session-ledger {backend}", exporter))
        return out

    def servers(self, stack: contextlib.ExitStack) -> list[tuple[str, http_api.Server]]:
        """`session-ledger serve` on SQLite and PostgreSQL, each without and with a master
        key (a store each), stopped when `stack` closes."""
        if importlib.util.find_spec("session_ledger.api.cli") is None:
            return []
        out = []
        for sealed in (False, True):
            master = base64.b64encode(os.urandom(32)).decode("ascii") if sealed else None
            purpose = "http-encrypted" if sealed else "http"
            for backend, workdir, url in self.scratch_stores(stack, purpose):
                server = stack.enter_context(http_api.serving(url, workdir, self.messages,
                                                              master))  # fmt: skip
                name = f"session-ledger {backend}{' encrypted' if sealed else ''} HTTP"
                out.append((name, server))
        return out


def command_line(args: list[str]) -> str:
    """The command as run, every option included: results.write files a quick or
    filtered run as partial by its options, so that it never replaces latest.json."""
    return shlex.join(["python", "-m", "bench.run", *args])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller, 1 repetition, minutes")
    parser.add_argument("--reps", type=int, help="repetitions (medians over them)")
    parser.add_argument("--only", help="regex: run only the stores whose name matches")
    parser.add_argument(
        "--workloads",
        default="W1,W1x4,W2,W3,W4,W5,W6,W7",
        help="a subset, e.g. W3,W4 (W3 and W4 share their loaded histories)",
    )
    parser.add_argument("--no-postgres", action="store_true", help="skip PostgreSQL stores")
    parser.add_argument("--workdir", default="var/bench", help="where SQLite/JSON files go")
    parser.add_argument("--out", default=str(Path(__file__).parent / "results"))
    raw_args = sys.argv[1:] if argv is None else argv
    args = parser.parse_args(raw_args)

    plan = QUICK if args.quick else FULL
    if args.reps:
        plan = dataclasses.replace(plan, reps=args.reps)
    scratch: ScratchDatabases | None = None
    if not args.no_postgres:
        scratch = ScratchDatabases(server_url())
        why = scratch.reachable()
        if why is not None:
            log(f"PostgreSQL unreachable, its stores are skipped: {why}")
            scratch = None
    chosen = factories(scratch is not None)
    if args.only:
        chosen = [f for f in chosen if re.search(args.only, f().name)]
    runner = Runner(plan, Path(args.workdir).resolve(), scratch)
    started = time.time()
    measured = results.revision()  # now: commits may land while the run goes on
    try:
        runner.run(chosen, set(args.workloads.split(",")))
    finally:
        if scratch is not None:
            scratch.drop_all()
    stores = [f() for f in chosen]
    rank = {"ours": 0, "raw": 1, "peer": 2}
    names = [s.name for s in sorted(stores, key=lambda s: rank[s.group])]
    peers = [(s.name, s.backend, not s.reads_process_memory) for s in stores if s.group == "peer"]
    sizes = list(plan.w3_sizes + plan.w3_ours_only)
    workloads = ["W1", "W1x4", "W2"] + [f"W3@{s}" for s in sizes] + [f"W4@{plan.w4_size}"]
    workloads += ["W5 window@v", "W5 history@v"]
    judged = [judge(t, runner.cells) for t in targets(runner.cells, peers, sizes)]
    notes = [
        f"{s.name}: {note}"
        for s in (f() for f in chosen)
        for note in (s.window_note, s.history_note)
        if note
    ]
    notes.append(
        f"W3 raw tail SELECT reads the {runner.window_rows} newest rows: the window "
        "ChatMemoryBuffer keeps for this corpus at 4,000 tokens"
    )
    table = tables(runner.cells, names, workloads, judged, notes)
    table += http_table(runner.cells)
    table += encryption_table(runner.cells)
    table += export_table(runner.cells)
    command = command_line(raw_args)
    loads = ", ".join(f"{x:.1f}" for x in runner.load_averages)
    print(
        f"\n{'Quick' if args.quick else 'Full'} run, {plan.reps} repetition(s), "
        f"load average at each repetition's start: {loads}; "
        f"{time.time() - started:.0f} s; medians (W1/W1x4/W2 msg/s, W3/W4 ms):\n"
    )
    print(table)
    path = results.write(Path(args.out), plan, runner, judged, table, command, started, measured)
    log(f"\nwrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
