"""How far a put is from its floor: the same rows written by straight-line code.

A SQLite put parses and tokenizes its message, then stores the event's record, the
message row and the timeline row (with the hash chain and the token total) in one
transaction. The floor does that same work with the same pieces (`ChatMessage.parse`,
the ledger's tokenizer, the library's transcoder, `chain_step`, the views' statements),
in a plain loop: without the aggregate and its cache, the mapper, the write batch and
view changes, or the recorder's bookkeeping. What a put costs above the floor is those
layers; the floor against raw sqlite3 (the `make bench` anchor: one row and its commit,
in a file of its own) is what this design's writes cost at best.

The ledger and the floor write to one database file, a session each; the three writers
take turns in blocks (the first changing every round), so all see the same machine
speed. On a directory in memory (`--dir /dev/shm`) the figures are CPU alone; on disk
they include the commits' fsyncs, after which the same Python runs slower (its caches
are cold).

`python -m bench.put_floor [--rounds 20] [--block 100] [--dir DIR]` prints a Markdown
table and writes bench/results/put-floor-latest.json.
"""

from __future__ import annotations

import random
import sqlite3
import statistics
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventsourcing.utils import get_topic

from bench.anchors.raw_sqlite import RawSQLite
from bench.blocks import in_turns, run_diagnostic
from bench.corpus import conversation
from bench.stores import Context
from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.integrity import chain_step
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage, stored_body
from session_ledger.domain.session import MessagesAppended, session_id
from session_ledger.projections.sqlite import MESSAGE_INSERT
from session_ledger.projections.views import ADDED_TOKENS, SQLViews, utc_text

WARM_PUTS = 200  # per session, not timed: the first pages of every tree
ACTOR = "bench"


class FloorWriter:
    """Continues a session the ledger started, writing each put's rows itself."""

    def __init__(self, ledger: Ledger, db_path: Path, key: str) -> None:
        self.sid = session_id(ledger.default_tenant, key)
        self.tokenizer = ledger.tokenizer
        self.encode_state: Callable[[Any], bytes] = ledger.mapper.transcoder.encode
        self.event_insert: str = ledger.recorder.insert_events_statement  # type: ignore[attr-defined]
        self.timeline_insert = SQLViews._timeline_insert(ADDED_TOKENS)
        self.topic = get_topic(MessagesAppended)
        self.conn = sqlite3.connect(db_path, isolation_level=None, cached_statements=64)
        self.conn.execute("PRAGMA journal_mode=WAL")
        self.conn.execute("PRAGMA synchronous=FULL")
        self.version, self.count, self.next_id, chain, archived = self.conn.execute(
            "SELECT version, message_count, next_message_id, chain, archived_count"
            " FROM ledger_timeline WHERE session_id = ? ORDER BY version DESC LIMIT 1",
            (self.sid.hex,),
        ).fetchone()
        self.chain, self.archived = bytes(chain), archived

    def put(self, message: dict[str, Any]) -> None:
        m = ChatMessage.parse(message)
        d = {"role": m.role, "blocks": list(m.blocks), "additional_kwargs": m.additional_kwargs}
        body = stored_body(d, m.to_json())
        tokens = self.tokenizer.count(m.content)
        now = datetime.now(UTC)
        version, sid = self.version + 1, self.sid.hex
        state = self.encode_state(
            {"timestamp": now, "messages": [d], "actor": ACTOR, "reason": None,
             "idempotency_key": None, "request_digest": None}
        )  # fmt: skip
        chain = chain_step(self.chain, self.sid, version, self.topic, state)
        execute = self.conn.execute
        execute("BEGIN")
        execute(self.event_insert, (sid, version, self.topic, state))
        execute(MESSAGE_INSERT, (sid, "active", self.next_id, version, m.role, tokens.alone,
                                 tokens.joined, body))  # fmt: skip
        execute(self.timeline_insert, (sid, version, utc_text(now), "MessagesAppended", ACTOR,
                                       None, None, None, self.count + 1, self.next_id + 1, chain,
                                       self.archived, sid, version - 1, tokens.alone))  # fmt: skip
        execute("COMMIT")
        self.version, self.count, self.next_id, self.chain = (
            version, self.count + 1, self.next_id + 1, chain)  # fmt: skip

    def close(self) -> None:
        self.conn.close()


def measure(workdir: Path, rounds: int, block: int, warm: int = WARM_PUTS) -> dict[str, Any]:
    settings = Settings(database_url=f"sqlite:///{workdir / 'ledger.db'}", token_limit=4000)
    migrate(settings)
    ledger = open_ledger(settings)
    messages = conversation(4 * warm + 3 * rounds * block)
    feed = iter(messages)
    floor: FloorWriter | None = None
    raw = RawSQLite()
    raw.open(Context(workdir=workdir, postgres_url=None, window_rows=1))
    try:
        for _ in range(warm):
            ledger.put("ledger", next(feed), actor=ACTOR)
            ledger.put("floor", next(feed), actor=ACTOR)
        floor = FloorWriter(ledger, workdir / "ledger.db", "floor")
        for _ in range(warm):
            floor.put(next(feed))
            raw.append("raw", next(feed))
        floor_put = floor.put
        writers: dict[str, Callable[[], Any]] = {
            "ledger": lambda: ledger.put("ledger", next(feed), actor=ACTOR),
            "floor": lambda: floor_put(next(feed)),
            "raw": lambda: raw.append("raw", next(feed)),
        }
        blocks = in_turns(writers, rounds, block, random.Random())
    finally:
        if floor is not None:
            floor.close()
        ledger.close()
        raw.close()
    us = {name: statistics.median(values) for name, values in blocks.items()}
    return {"rounds": rounds, "block": block, "dir": str(workdir.parent), "put_us": us,
            "above_floor_us": us["ledger"] - us["floor"]}  # fmt: skip


def table(result: dict[str, Any]) -> str:
    us = result["put_us"]
    rows = (
        ("ledger put", us["ledger"]),
        ("floor: the same rows, straight-line", us["floor"]),
        ("raw sqlite3: one row (`make bench`'s anchor)", us["raw"]),
    )
    lines = ["| writer | µs per put | vs floor | raw's msg/s over this one's (W1's ratio) |",
             "|---|---|---|---|"]  # fmt: skip
    for name, value in rows:
        lines.append(f"| {name} | {value:.0f} | {value / us['floor']:.2f}x | "
                     f"{us['raw'] / value:.3f} |")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    run_diagnostic(__doc__, "put-floor", (20, 100), measure, table, lambda result: result)


if __name__ == "__main__":
    main()
