"""What the statements of one SQLite put cost under other table layouts, without any of
the ledger's Python: the evidence for (or against) changing what a put stores.

Each layout is a set of tables and the statements one single-message put runs in its
transaction (BEGIN, the statements, COMMIT), on a WAL file with synchronous=FULL. The
layouts take turns in rounds (a block of puts each, in a new random order every round),
so all are measured under the same machine speed; each figure is the median block. The
WAL frames per put are counted afterwards, in puts that read the WAL after each one.

- raw: one row and one index (the raw anchor of `make bench`).
- ledger: what a put stores today: the event (the library's table), the message row
  and the timeline row (which carries the session's head), with the tables `migrate`
  makes; the session row is written once, by the session's first put.
- one message table with a live-rows index: the ledger as it was until 2026-12-02, when
  live and ended rows shared a table, and an index of the live rows (written by every
  append) served their positions.
- session row updated by every put: the ledger with the session row that held the head
  before 2026-12-02 (what that UPDATE cost).
- no timeline: the ledger without the timeline row (what the timeline costs).
- timeline in event row: the timeline's columns on the event's own row.
- view rows in rowid tables: the message and timeline rows in tables keyed by one
  integer (the session's number, shifted, plus the row's id or version) instead of WITHOUT
  ROWID tables keyed by (session, ...). SQLite appends to a rowid table's last page
  without rebalancing its neighbours, and its inner pages hold integers, not whole rows.

`python -m bench.layout_cost [--rounds 60] [--block 50]` prints a Markdown table and
writes bench/results/layout-cost-latest.json.
"""

from __future__ import annotations

import hashlib
import random
import re
import sqlite3
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from bench.blocks import in_turns, run_diagnostic
from bench.corpus import conversation
from bench.write_cost import WalReader

NOW = "2026-01-01T00:00:00.000000Z"
WARM_PUTS = 200  # per layout, not timed: the first pages of every tree
FRAME_PUTS = 500  # per layout, after the timed rounds: the WAL read after each
TIMELINE_COLUMNS = (
    "recorded_at TEXT, event_type TEXT, actor TEXT, reason TEXT, idempotency_key TEXT,"
    " request_digest TEXT, message_count INTEGER, next_message_id INTEGER, chain BLOB"
)

# The session row of the layout before 2026-12-02: the head, updated by every write.
HEAD_TABLE = (
    "CREATE TABLE IF NOT EXISTS ledger_sessions (session_id TEXT PRIMARY KEY,"
    " tenant TEXT NOT NULL, session_key TEXT NOT NULL, version INTEGER NOT NULL,"
    " message_count INTEGER NOT NULL, archived_count INTEGER NOT NULL,"
    " token_total INTEGER NOT NULL, created_at TEXT NOT NULL, updated_at TEXT NOT NULL)"
    " WITHOUT ROWID"
)
# The message table (and its indexes) before 2026-12-02: live and ended rows together.
ONE_MESSAGE_TABLE = [
    "CREATE TABLE ledger_messages (session_id TEXT NOT NULL, message_id INTEGER NOT NULL,"
    " valid_from INTEGER NOT NULL, valid_to INTEGER, status TEXT NOT NULL, role TEXT NOT NULL,"
    " tokens INTEGER NOT NULL, tokens_joined INTEGER NOT NULL, message TEXT NOT NULL,"
    " PRIMARY KEY (session_id, message_id, valid_from)) WITHOUT ROWID",
    "CREATE INDEX ledger_messages_live ON ledger_messages"
    " (session_id, status, message_id, role, tokens, tokens_joined) WHERE valid_to IS NULL",
    "CREATE INDEX ledger_messages_ended ON ledger_messages"
    " (session_id, valid_to) WHERE valid_to IS NOT NULL",
]
HEAD_UPSERT = (
    "INSERT INTO ledger_sessions (session_id, tenant, session_key, version, message_count,"
    " archived_count, token_total, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"
    " ON CONFLICT (session_id) DO UPDATE SET version = excluded.version,"
    " message_count = excluded.message_count, archived_count = excluded.archived_count,"
    " token_total = ledger_sessions.token_total + excluded.token_total,"
    " updated_at = excluded.updated_at"
)

# Rowid tables keyed by SESSION_NUMBER << ROWID_SHIFT | id: a layout the views could use.
SESSION_NUMBER, ROWID_SHIFT = 1, 40
ROWID_VIEWS = ("ledger_messages", "ledger_timeline")


def rowid_keyed(create: str) -> str:
    """`migrate`'s WITHOUT ROWID view table, as a rowid table with the integer key `k` first
    and the same columns (so the layout follows any change to the views' columns)."""
    create = create.replace("IF NOT EXISTS ", "").replace(" (", " (k INTEGER PRIMARY KEY,", 1)
    return re.sub(r", PRIMARY KEY \([^)]*\)\) WITHOUT ROWID$", ")", create)


def keyed_insert(insert: str) -> str:
    """An INSERT of a view row, with the key `k` as its first column and parameter."""
    return insert.replace(" (", " (k, ", 1).replace("VALUES (", "VALUES (?, ", 1)


Put = Callable[[sqlite3.Connection, int], None]


@dataclass
class Layout:
    name: str
    tables: list[str]
    statements: list[Put]


def sample_put() -> tuple[str, str, bytes]:
    """A message as a put stores it: its view row's body, its event's topic and state."""
    from session_ledger.api.bootstrap import open_ledger
    from session_ledger.api.settings import Settings
    from session_ledger.domain.session import session_id

    ledger = open_ledger(Settings(database_url="memory://"))
    try:
        ledger.put("k", conversation(1)[0])
        sid = session_id(ledger.default_tenant, "k")
        (*_, record) = ledger.recorder.select_events(sid)
        ((_, body),) = ledger.views.history_bodies(sid, "active", 0, None)
        return body, record.topic, record.state
    finally:
        ledger.close()


def layouts(body: str, topic: str, state: bytes) -> list[Layout]:
    """The layouts compared, each putting `body` (a message row) and its event record."""
    from session_ledger.projections.sqlite import VIEW_TABLES
    from session_ledger.projections.views import (
        LIVE_COLUMNS,
        PREVIOUS_TOKENS,
        SESSION_INSERT,
        SQLViews,
    )

    sid = uuid.uuid4().hex
    chain = hashlib.sha256(state).digest()
    event_table = (  # the library's, as `migrate` makes it
        "CREATE TABLE ledger_events (originator_id TEXT, originator_version INTEGER,"
        " topic TEXT, state BLOB, PRIMARY KEY (originator_id, originator_version))"
    )
    wide_event_table = event_table.replace("state BLOB,", f"state BLOB, {TIMELINE_COLUMNS},")

    def event(c: sqlite3.Connection, v: int) -> None:
        c.execute(
            "INSERT INTO ledger_events (originator_id, originator_version, topic, state)"
            " VALUES (?, ?, ?, ?)",
            (sid, v, topic, state),
        )

    def wide_event(c: sqlite3.Connection, v: int) -> None:
        c.execute(
            "INSERT INTO ledger_events VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (sid, v, topic, state, NOW, "MessagesAppended", "local", None, None, None, v, v,
             chain),
        )  # fmt: skip

    message_insert = f"INSERT INTO ledger_messages ({LIVE_COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, ?)"

    def message(c: sqlite3.Connection, v: int) -> None:
        c.execute(message_insert, (sid, "active", v, v, "user", 90, 91, body))

    def message_one_table(c: sqlite3.Connection, v: int) -> None:
        c.execute(
            "INSERT INTO ledger_messages (session_id, message_id, valid_from, valid_to, status,"
            " role, tokens, tokens_joined, message) VALUES (?, ?, ?, NULL, ?, ?, ?, ?, ?)",
            (sid, v, v, "active", "user", 90, 91, body),
        )

    def session(c: sqlite3.Connection, v: int) -> None:
        if v == 1:
            c.execute(SESSION_INSERT, (sid, "default", "k", NOW))

    def session_head(c: sqlite3.Connection, v: int) -> None:
        c.execute(HEAD_UPSERT, (sid, "default", "k", v, v, 0, 90, NOW, NOW))

    first_row = SQLViews._timeline_insert("?")
    next_row = SQLViews._timeline_insert(f"{PREVIOUS_TOKENS} + ?")

    def timeline(c: sqlite3.Connection, v: int) -> None:
        row = (sid, v, NOW, "MessagesAppended", "local", None, None, None, v, v, chain, 0)
        if v == 1:
            c.execute(first_row, (*row, 90))
        else:
            c.execute(next_row, (*row, sid, v - 1, 90))

    def row_key(v: int) -> int:
        return SESSION_NUMBER << ROWID_SHIFT | v

    keyed_message = keyed_insert(message_insert)
    keyed_first_row = keyed_insert(first_row)
    # No index of (session, version) here: the row before is found by its key.
    keyed_next_row = keyed_insert(
        SQLViews._timeline_insert("(SELECT token_total FROM ledger_timeline WHERE k = ?) + ?")
    )

    def message_rowid(c: sqlite3.Connection, v: int) -> None:
        c.execute(keyed_message, (row_key(v), sid, "active", v, v, "user", 90, 91, body))

    def timeline_rowid(c: sqlite3.Connection, v: int) -> None:
        row = (row_key(v), sid, v, NOW, "MessagesAppended", "local", None, None, None, v, v,
               chain, 0)  # fmt: skip
        if v == 1:
            c.execute(keyed_first_row, (*row, 90))
        else:
            c.execute(keyed_next_row, (*row, row_key(v - 1), 90))

    def raw(c: sqlite3.Connection, v: int) -> None:
        c.execute("INSERT INTO messages (session, data) VALUES (?, ?)", (sid, body))

    raw_tables = [
        "CREATE TABLE messages (id INTEGER PRIMARY KEY AUTOINCREMENT, session TEXT NOT NULL,"
        " data TEXT NOT NULL)",
        "CREATE INDEX messages_session_id ON messages (session, id)",
    ]
    head_tables = [
        HEAD_TABLE if t.startswith("CREATE TABLE IF NOT EXISTS ledger_sessions") else t
        for t in VIEW_TABLES
    ]
    one_table = [
        *ONE_MESSAGE_TABLE,
        *(t for t in VIEW_TABLES if "messages" not in t.split("(")[0]),
    ]
    rowid_tables = [
        rowid_keyed(t) if any(f"EXISTS {n} (" in t for n in ROWID_VIEWS) else t for t in VIEW_TABLES
    ]
    return [
        Layout("raw", raw_tables, [raw]),
        Layout("ledger", [event_table, *VIEW_TABLES], [event, message, session, timeline]),
        Layout(
            "one message table with a live-rows index",
            [event_table, *one_table],
            [event, message_one_table, session, timeline],
        ),
        Layout(
            "session row updated by every put",
            [event_table, *head_tables],
            [event, message, session_head, timeline],
        ),
        Layout("no timeline", [event_table, *VIEW_TABLES], [event, message, session]),
        Layout(
            "timeline in event row",
            [wide_event_table, *VIEW_TABLES],
            [wide_event, message, session],
        ),
        Layout(
            "view rows in rowid tables",
            [event_table, *rowid_tables],
            [event, message_rowid, session, timeline_rowid],
        ),
    ]


class Runner:
    """A layout on a database file of its own, and the times of its blocks of puts."""

    def __init__(self, layout: Layout, path: Path) -> None:
        self.layout = layout
        self.path = path
        self.conn = sqlite3.connect(path, isolation_level=None, cached_statements=256)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        for statement in layout.tables:
            self.conn.execute(statement)
        self.version = 0
        self.block_us: list[float] = []

    def block(self, puts: int) -> float:
        """`puts` puts; returns µs per put."""
        t0 = time.perf_counter()
        for _ in range(puts):
            self.put()
        return (time.perf_counter() - t0) / puts * 1e6

    def put(self) -> None:
        self.version += 1
        self.conn.execute("BEGIN")
        for statement in self.layout.statements:
            statement(self.conn, self.version)
        self.conn.execute("COMMIT")

    def frames_per_put(self, puts: int) -> float:
        """WAL frames per put, read after each one (a checkpoint may restart the WAL)."""
        wal = WalReader(self.path.with_name(self.path.name + "-wal"))
        wal.commits()
        frames = 0
        for _ in range(puts):
            self.put()
            frames += sum(len(pages) for pages in wal.commits())
        return frames / puts

    def rows(self, table: str) -> int:
        return int(self.conn.execute(f"SELECT count(*) FROM {table}").fetchone()[0])


def measure(workdir: Path, rounds: int, block: int, seed: int = 0) -> list[dict[str, Any]]:
    runners = [
        Runner(lay, workdir / f"layout-{i}.db") for i, lay in enumerate(layouts(*sample_put()))
    ]
    try:
        for r in runners:
            r.block(WARM_PUTS)  # the first pages of every tree
        times = in_turns({r: r.put for r in runners}, rounds, block, random.Random(seed))
        for r in runners:
            r.block_us = times[r]
        frames = [r.frames_per_put(FRAME_PUTS) for r in runners]
        raw = statistics.median(runners[0].block_us)
        return [
            {
                "layout": r.layout.name,
                "put_us": statistics.median(r.block_us),
                "vs_raw": statistics.median(r.block_us) / raw,
                "frames_per_put": f,
                "blocks_us": r.block_us,
            }
            for r, f in zip(runners, frames, strict=True)
        ]
    finally:
        for r in runners:
            r.conn.close()


def table(rows: list[dict[str, Any]]) -> str:
    lines = ["| layout | µs per put | vs raw | WAL frames per put |", "|---|---|---|---|"]
    for row in rows:
        lines.append(f"| {row['layout']} | {row['put_us']:.0f} | {row['vs_raw']:.2f}x "
                     f"| {row['frames_per_put']:.2f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    run_diagnostic(
        __doc__, "layout-cost", (60, 50), measure, table,
        lambda rows: {"layouts": rows},
    )  # fmt: skip


if __name__ == "__main__":
    main()
