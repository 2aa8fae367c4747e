"""Where a durable SQLite write's time goes: WAL frames per commit, by b-tree.

In WAL mode with synchronous=FULL a commit appends one frame (a page, 4 KiB, and a
header) for every page the transaction changed, then fsyncs the WAL. Stores that do
the same number of fsyncs differ by how many pages each write touches, so this
counts them: it runs N single-message writes, reads the frames each commit appended
to the WAL (following it through checkpoints), and names each frame's b-tree (table
or index) through SQLite's `dbstat` table. It also times each write, and says how
often a write changed more than one page of a b-tree: a leaf that filled up. A table
with a rowid, appended at its end, then adds one new page and changes its parent; a
WITHOUT ROWID table or an index rebalances the leaf with its siblings, changing 4 or
5 pages, and leaves the last leaf half full, so it fills again sooner.

Compared, each through the store `make bench` drives: session-ledger (its public
`put`), raw sqlite3 (one INSERT), and OpenAI Agents' `SQLiteSession` when the bench
extra is installed. Only the database files are looked at, so the ledger's own code
can change freely.

`python -m bench.diagnostics.write_cost [--writes 1000] [--sessions 1]` prints a
Markdown table and writes bench/results/write-cost-<n>-sessions-latest.json.
"""

from __future__ import annotations

import argparse
import collections
import sqlite3
import statistics
import struct
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import Message, conversation
from bench.results import write_diagnostic
from bench.stores import Context, Store

WARM_WRITES = 200  # not counted: creates the sessions and the first pages
WAL_HEADER = 32
FRAME_HEADER = 24


@dataclass
class Cost:
    store: str
    writes: int
    frames_per_write: float
    by_btree: dict[str, float]  # frames per write
    write_us: float  # median wall time of one write
    # b-tree -> [share of writes that changed more than one of its pages (a split or a
    # rebalance of siblings), the pages such a write changed on average]
    splits: dict[str, list[float]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


class WalReader:
    """Follows a WAL file as it grows: the pages of each commit appended since the last
    call. A checkpoint that restarts the WAL (new salts in its header) is followed to
    the file's start, so the store's own checkpoint settings stay as they are."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.salts = b""
        self.offset = WAL_HEADER
        self.pending: list[int] = []

    def commits(self) -> list[list[int]]:
        try:
            with self.path.open("rb") as wal:
                header = wal.read(WAL_HEADER)
                if len(header) < WAL_HEADER:
                    return []
                page_size = struct.unpack(">I", header[8:12])[0]
                salts = header[16:24]
                if salts != self.salts:  # a new WAL, or a restarted one: from the start
                    self.salts, self.offset, self.pending = salts, WAL_HEADER, []
                wal.seek(self.offset)
                data = wal.read()  # the frames written since the last call
        except FileNotFoundError:
            return []
        out: list[list[int]] = []
        at = 0
        while at + FRAME_HEADER + page_size <= len(data):
            frame = data[at : at + FRAME_HEADER]
            if frame[8:16] != salts:  # left over from before a restart: the end
                break
            page, db_size_after_commit = struct.unpack(">II", frame[:8])
            self.pending.append(page)
            if db_size_after_commit:  # non-zero only on a transaction's last frame
                out.append(self.pending)
                self.pending = []
            at += FRAME_HEADER + page_size
        self.offset += at
        return out


def wal_commits(path: Path) -> list[list[int]]:
    """The page numbers each commit in the WAL file at `path` wrote, in order."""
    return WalReader(path).commits()


def btree_names(db: Path) -> dict[int, str]:
    """Page number -> the table or index it belongs to (page 1 holds the file header)."""
    with sqlite3.connect(db) as conn:
        try:
            names = dict(conn.execute("SELECT pageno, name FROM dbstat").fetchall())
        except sqlite3.OperationalError:  # built without the dbstat table
            return {}
    names[1] = "page 1 (file header and schema)"
    return names


def measure(store: str, db: Path, write: Callable[[int], None], writes: int) -> Cost:
    """`write(i)` `writes` times after the warm-up; each write's frames are read from
    `db`'s WAL right after it."""
    for i in range(WARM_WRITES):
        write(i)
    reader = WalReader(db.with_name(db.name + "-wal"))
    reader.commits()  # skip what the warm-up wrote
    times = []
    measured: list[list[int]] = []
    for i in range(WARM_WRITES, WARM_WRITES + writes):
        t0 = time.perf_counter()
        write(i)
        times.append(time.perf_counter() - t0)
        measured += reader.commits()
    notes = []
    names = btree_names(db)
    counts: collections.Counter[str] = collections.Counter()
    many: dict[str, list[int]] = collections.defaultdict(list)  # b-tree -> pages, if > 1
    for pages in measured:
        per_commit = collections.Counter(names.get(p, "a page freed since (a split)")
                                         for p in pages)  # fmt: skip
        counts.update(per_commit)
        for name, n in per_commit.items():
            if n > 1:
                many[name].append(n)
    extra = len(measured) - writes
    if extra > 0:
        notes.append(f"{extra} commits besides the writes (snapshots, every 200 events)")
    return Cost(
        store=store,
        writes=writes,
        frames_per_write=sum(counts.values()) / writes,
        by_btree={k: v / writes for k, v in counts.most_common()},
        write_us=statistics.median(times) * 1e6,
        notes=notes,
        splits={k: [len(v) / writes, statistics.mean(v)] for k, v in sorted(many.items())},
    )


@contextmanager
def opened(store: Store, workdir: Path) -> Iterator[Store]:
    store.open(Context(workdir=workdir, postgres_url=None, window_rows=1))
    try:
        yield store
    finally:
        store.close()


def stores() -> list[tuple[Store, str]]:
    """The stores compared, each with the name of the SQLite file it writes."""
    from bench.anchors.raw_sqlite import RawSQLite
    from bench.ledger import LedgerStore

    out: list[tuple[Store, str]] = [
        (LedgerStore("sqlite"), "ledger.db"),
        (RawSQLite(), "raw-sqlite3.db"),
    ]
    try:
        from bench.anchors.openai_agents import AgentsSQLite
    except ImportError:  # the bench extra is not installed
        return out
    return [*out, (AgentsSQLite(), "openai-agents.db")]


def cost(
    store: Store, file: str, workdir: Path, messages: list[Message], writes: int, sessions: int
) -> Cost:
    """What `writes` single-message writes of `store`, spread over `sessions`, cost."""
    with opened(store, workdir):
        natives = [store.native(m) for m in messages]
        return measure(
            store.name,
            workdir / file,
            lambda i: store.append(f"s{i % sessions}", natives[i]),
            writes,
        )


def table(costs: list[Cost]) -> str:
    lines = [
        "| store | WAL frames per write | by b-tree (frames per write) | write µs |",
        "|---|---|---|---|",
    ]
    for c in costs:
        parts = ", ".join(f"{name} {v:.2f}" for name, v in c.by_btree.items())
        lines.append(f"| {c.store} | {c.frames_per_write:.2f} | {parts} | {c.write_us:.0f} |")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    args = parser.parse_args()
    messages = conversation(WARM_WRITES + args.writes)
    costs: list[Cost] = []
    with tempfile.TemporaryDirectory(prefix="write-cost-", dir=args.workdir) as scratch:
        for store, file in stores():
            workdir = Path(scratch) / file.removesuffix(".db")
            workdir.mkdir()
            costs.append(cost(store, file, workdir, messages, args.writes, args.sessions))
    print(
        f"{args.writes} single-message writes to {args.sessions} session(s), "
        f"after {WARM_WRITES} not counted; medians:\n"
    )
    print(table(costs))
    for c in costs:
        for note in c.notes:
            print(f"- {c.store}: {note}")
        for name, (share, pages) in c.splits.items():
            print(f"- {c.store}: {share:.0%} of writes changed more than one page of "
                  f"{name} ({pages:.1f} pages each)")  # fmt: skip
    record: dict[str, Any] = {"writes": args.writes, "sessions": args.sessions}
    write_diagnostic(
        f"write-cost-{args.sessions}-sessions-latest.json",
        {**record, "costs": [asdict(c) for c in costs]},
    )


if __name__ == "__main__":
    main()
