"""Where a durable SQLite write's time goes: WAL frames per commit, by b-tree.

In WAL mode with synchronous=FULL a commit appends one frame (a page, 4 KiB, and a
header) for every page the transaction changed, then fsyncs the WAL. Stores that do
the same number of fsyncs differ by how many pages each write touches, so this
counts them: it runs N single-message writes, reads the frames each commit appended
to the WAL (following it through checkpoints), and names each frame's b-tree (table
or index) through SQLite's `dbstat` table. It also times each write and, where the
store's connection can be reached, its COMMIT.

Compared: session-ledger (event + message row + timeline row with its hash + session
row), raw sqlite3 (one INSERT), and OpenAI Agents' `SQLiteSession` when the bench
extra is installed.

`python -m bench.write_cost [--writes 1000] [--sessions 1]` prints a Markdown table
and writes bench/results/write-cost-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import json
import sqlite3
import statistics
import struct
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from bench.corpus import conversation
from bench.results import write_diagnostic

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
    commit_us: float | None = None  # median wall time of its COMMIT, where measured
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


def measure(
    store: str,
    db: Path,
    write: Callable[[int], None],
    writes: int,
    commit_times: list[float] | None = None,
) -> Cost:
    """`write(i)` `writes` times after the warm-up; each write's frames are read from
    `db`'s WAL right after it."""
    for i in range(WARM_WRITES):
        write(i)
    reader = WalReader(db.with_name(db.name + "-wal"))
    reader.commits()  # skip what the warm-up wrote
    if commit_times is not None:
        commit_times.clear()
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
    for pages in measured:
        for page in pages:
            counts[names.get(page, "a page freed since (a split)")] += 1
    extra = len(measured) - writes
    if extra > 0:
        notes.append(f"{extra} commits besides the writes (snapshots, every 200 events)")
    return Cost(
        store=store,
        writes=writes,
        frames_per_write=sum(counts.values()) / writes,
        by_btree={k: v / writes for k, v in counts.most_common()},
        write_us=statistics.median(times) * 1e6,
        commit_us=statistics.median(commit_times) * 1e6 if commit_times else None,
        notes=notes,
    )


class _TimedCommit:
    """A sqlite3 connection whose commit() is timed into `times`."""

    def __init__(self, conn: sqlite3.Connection, times: list[float]) -> None:
        self._conn = conn
        self._times = times

    def __getattr__(self, name: str) -> Any:
        return getattr(self._conn, name)

    def commit(self) -> None:
        t0 = time.perf_counter()
        self._conn.commit()
        self._times.append(time.perf_counter() - t0)


def ledger_cost(workdir: Path, messages: list[dict[str, Any]], writes: int, sessions: int) -> Cost:
    from session_ledger.api.bootstrap import migrate, open_ledger
    from session_ledger.api.settings import Settings
    from session_ledger.domain.messages import ChatMessage
    from session_ledger.projections.sqlite import _LedgerConnection

    db = workdir / "ledger.db"
    settings = Settings(database_url=f"sqlite:///{db}", token_limit=4000)
    migrate(settings)
    ledger = open_ledger(settings)
    native = [ChatMessage.text(m["role"], m["content"]) for m in messages]
    pool = ledger.recorder.datastore.pool
    commit_times: list[float] = []
    conn = pool.get_connection(is_writer=True)
    try:
        assert isinstance(conn, _LedgerConnection)
        conn.sqlite = _TimedCommit(conn.sqlite, commit_times)  # type: ignore[assignment]
    finally:
        pool.put_connection(conn)
    try:
        return measure(
            "session-ledger sqlite",
            db,
            lambda i: ledger.put(f"s{i % sessions}", native[i]),
            writes,
            commit_times,
        )
    finally:
        ledger.close()


def raw_cost(workdir: Path, messages: list[dict[str, Any]], writes: int, sessions: int) -> Cost:
    db = workdir / "raw.db"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA synchronous=FULL")
    conn.executescript(
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL,"
        " data TEXT NOT NULL); CREATE INDEX messages_session_id ON messages (session, id);"
    )
    commit_times: list[float] = []

    def write(i: int) -> None:
        conn.execute(
            "INSERT INTO messages (session, data) VALUES (?, ?)",
            (f"s{i % sessions}", json.dumps(messages[i])),
        )
        t0 = time.perf_counter()
        conn.commit()
        commit_times.append(time.perf_counter() - t0)

    try:
        return measure("raw sqlite3 WAL+FULL", db, write, writes, commit_times)
    finally:
        conn.close()


def agents_cost(
    workdir: Path, messages: list[dict[str, Any]], writes: int, sessions: int
) -> Cost | None:
    try:
        from agents.memory import SQLiteSession
    except ImportError:
        return None
    db = workdir / "openai-agents.db"
    loop = asyncio.new_event_loop()
    handles: dict[str, Any] = {}

    def write(i: int) -> None:
        key = f"s{i % sessions}"
        if key not in handles:
            handles[key] = SQLiteSession(key, str(db))
        loop.run_until_complete(handles[key].add_items([messages[i]]))

    try:
        return measure("OpenAI Agents SQLiteSession", db, write, writes)
    finally:
        for handle in handles.values():
            handle.close()
        loop.close()


def table(costs: list[Cost]) -> str:
    lines = [
        "| store | WAL frames per write | by b-tree (frames per write) | write µs | commit µs |",
        "|---|---|---|---|---|",
    ]
    for c in costs:
        parts = ", ".join(f"{name} {v:.2f}" for name, v in c.by_btree.items())
        commit = f"{c.commit_us:.0f}" if c.commit_us is not None else "—"
        lines.append(
            f"| {c.store} | {c.frames_per_write:.2f} | {parts} | {c.write_us:.0f} | {commit} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--writes", type=int, default=1000)
    parser.add_argument("--sessions", type=int, default=1)
    parser.add_argument("--workdir", type=Path, default=None, help="default: a temporary dir")
    args = parser.parse_args()
    messages = conversation(WARM_WRITES + args.writes)
    with tempfile.TemporaryDirectory(prefix="write-cost-", dir=args.workdir) as scratch:
        workdir = Path(scratch)
        costs = [
            ledger_cost(workdir, messages, args.writes, args.sessions),
            raw_cost(workdir, messages, args.writes, args.sessions),
        ]
        agents = agents_cost(workdir, messages, args.writes, args.sessions)
        if agents is not None:
            costs.append(agents)
    print(
        f"{args.writes} single-message writes to {args.sessions} session(s), "
        f"after {WARM_WRITES} not counted; medians:\n"
    )
    print(table(costs))
    for c in costs:
        for note in c.notes:
            print(f"- {c.store}: {note}")
    write_diagnostic(
        f"write-cost-{args.sessions}-sessions-latest.json",
        {"writes": args.writes, "sessions": args.sessions, "costs": [asdict(c) for c in costs]},
    )


if __name__ == "__main__":
    main()
