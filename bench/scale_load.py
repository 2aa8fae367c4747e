"""The scale run's bulk load: append-only sessions written with COPY, through the ledger's
own encoding.

Each write is built as the ledger builds it (`parse_messages`, the tokenizer's counts,
the `Session` aggregate's events, the application's mapper, `view_changes`, the hash
chain of `domain/integrity.py`), and its rows go to the same tables a live write fills,
by COPY instead of one statement per write. Only appends are loaded (one message per
write, as an agent's `put`), so each token total is the one before plus what the write
added. No snapshots are written: the first live write to a loaded session reads its
events back (reads never need them). `tests/bench/test_scale_load.py` checks a load
against `rebuild --check` and `verify`.

`load_parallel` is the fast path: the sessions split into rounds of about FLUSH_EVENTS
events that worker processes (one per core by default) encode and COPY on connections of
their own, while the secondary indexes of the loaded tables wait until the end
(`deferred_indexes`): building an index once over sorted rows costs far less than
updating it row by row.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import psycopg

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.inputs import parse_messages
from session_ledger.domain.integrity import GENESIS, chain_hashes
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import WriteBatch
from session_ledger.domain.session import Session, session_id
from session_ledger.projections.changes import InsertMessages, view_changes
from session_ledger.projections.sql import LIVE_COLUMNS, TIMELINE_COLUMNS

from .corpus import conversation

GIANT = 100_000  # messages in the longest sessions
FLUSH_EVENTS = 20_000  # events per COPY round and commit
TEXTS = [m["content"] for m in conversation(512, seed=7)]  # ~400 characters each


@dataclass(frozen=True)
class Plan:
    """Who holds how many messages: long-tailed, with some sessions of GIANT messages."""

    events: int
    sessions: list[tuple[str, str, int]]  # (tenant, key, messages)
    giants: list[tuple[str, str]] = field(default_factory=list)

    @property
    def tenants(self) -> list[str]:
        return sorted({t for t, _, _ in self.sessions})


def plan(events: int, sessions: int | None = None, seed: int = 1) -> Plan:
    """`events` stored events (each session's SessionStarted among them) over `sessions`
    sessions (default one per 100 events): one session of `min(GIANT, events // 10)`
    messages per million events (at least one), the rest Pareto-distributed."""
    rng = random.Random(seed)
    count = sessions or max(10, events // 100)
    tenants = max(10, count // 1_000)
    giant_size = min(GIANT, events // 10)
    giants = max(1, events // 1_000_000)
    rest = events - giants * (giant_size + 1) - (count - giants)  # messages of the others
    weights = [rng.paretovariate(1.2) for _ in range(count - giants)]
    scale = rest / sum(weights)
    lengths = [max(1, min(GIANT // 5, round(w * scale))) for w in weights]
    lengths[-1] = max(1, lengths[-1] + rest - sum(lengths))
    out, big = [], []
    for n in range(count):
        tenant = f"tenant-{n % tenants:03d}"
        key = f"s{n:07d}"
        if n < giants:
            out.append((tenant, key, giant_size))
            big.append((tenant, key))
        else:
            out.append((tenant, key, lengths[n - giants]))
    return Plan(events=events, sessions=out, giants=big)


class Rows:
    """Rows waiting for the next COPY round."""

    def __init__(self) -> None:
        self.events: list[tuple[Any, ...]] = []
        self.sessions: list[tuple[Any, ...]] = []
        self.messages: list[tuple[Any, ...]] = []
        self.timeline: list[tuple[Any, ...]] = []
        self.raw_json_bytes = 0


def session_writes(
    ledger: Ledger, tenant: str, key: str, messages: int, rows: Rows
) -> Iterator[int]:
    """Append `messages` messages to a new session, one write each, adding each write's
    rows to `rows`; yields the events each write stored."""
    sid = session_id(tenant, key)
    session: Session | None = None
    chain, total = GENESIS, 0
    for i in range(messages):
        text = TEXTS[(i * 7 + len(key)) % len(TEXTS)]
        parsed = parse_messages([{"role": ("user", "assistant")[i % 2], "content": f"{i}: {text}"}],
                                ledger.limits, allow_empty=False)  # fmt: skip
        audit = {"actor": ledger.default_actor, "reason": None,
                 "idempotency_key": f"w-{uuid.uuid4().hex}", "request_digest": None}  # fmt: skip
        if session is None:
            session = Session(tenant=tenant, key=key, **audit)
        first_id = session.next_message_id
        session.append(parsed.dicts, **audit)
        pending = tuple(session.collect_events())
        batch = WriteBatch(
            session_id=sid, tenant=tenant, key=key, events=pending, first_message_id=first_id,
            message_count=session.message_count, archived_count=session.archived_count,
            next_message_id=session.next_message_id,
            counts=tuple(ledger.tokenizer.count(m.content) for m in parsed.messages),
            bodies=parsed.texts,
        )  # fmt: skip
        vc = view_changes(batch)
        stored = [ledger.mapper.to_stored_event(e) for e in pending]
        records = [(s.originator_version, s.topic, s.state) for s in stored]
        rows.events += [(sid, s.originator_version, s.topic, s.state) for s in stored]
        if vc.started:
            rows.sessions.append((sid, tenant, key, vc.session.created_at))
        for change in vc.changes:
            assert isinstance(change, InsertMessages)  # appends only
            rows.messages += [
                (sid, change.status, r.message_id, change.version, r.role, r.tokens,
                 r.tokens_joined, r.body) for r in change.rows
            ]  # fmt: skip
        rows.raw_json_bytes += sum(len(t.encode()) for t in parsed.texts)
        for t, h in zip(vc.timeline, chain_hashes(sid, records, chain), strict=True):
            total += t.tokens_added
            rows.timeline.append((sid, t.version, t.recorded_at, t.event_type, t.actor, t.reason,
                                  t.idempotency_key, t.request_digest, t.message_count,
                                  t.next_message_id, h, t.archived_count, total))  # fmt: skip
            chain = h
        yield len(stored)


def copy_rows(conn: Any, rows: Rows) -> None:
    """One COPY per table, committed together."""
    tables = (
        ("ledger_events (originator_id, originator_version, topic, state)", rows.events),
        ("ledger_sessions (session_id, tenant, session_key, created_at)", rows.sessions),
        (f"ledger_messages ({LIVE_COLUMNS})", rows.messages),
        (f"ledger_timeline ({TIMELINE_COLUMNS})", rows.timeline),
    )
    with conn.transaction(), conn.cursor() as cur:
        for target, values in tables:
            if values:
                with cur.copy(f"COPY {target} FROM STDIN") as copy:
                    for row in values:
                        copy.write_row(row)
    for _, values in tables:
        values.clear()


def load(ledger: Ledger, conn: Any, the_plan: Plan, progress: Any = None) -> int:
    """Write the plan's sessions; returns the raw JSON bytes of their messages."""
    rows, pending, done, raw = Rows(), 0, 0, 0
    for tenant, key, messages in the_plan.sessions:
        for stored in session_writes(ledger, tenant, key, messages, rows):
            pending += stored
            if pending >= FLUSH_EVENTS:
                raw += rows.raw_json_bytes
                rows.raw_json_bytes = 0
                copy_rows(conn, rows)
                done, pending = done + pending, 0
                if progress is not None:
                    progress(done)
    raw += rows.raw_json_bytes
    copy_rows(conn, rows)
    if progress is not None:
        progress(done + pending)
    return raw


LOADED_TABLES = ("ledger_events", "ledger_sessions", "ledger_messages", "ledger_timeline")
# Secondary indexes: neither a primary key nor an index behind a constraint. On a
# partitioned table these are the parent's, and dropping one drops its partitions' too.
SECONDARY_INDEXES = """
SELECT i.indexrelid::regclass::text, pg_get_indexdef(i.indexrelid)
FROM pg_index i JOIN pg_class t ON t.oid = i.indrelid
WHERE t.relname = ANY(%s) AND t.relnamespace = 'public'::regnamespace
  AND NOT i.indisprimary
  AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)
ORDER BY 1
"""


@contextmanager
def deferred_indexes(url: str, tables: Sequence[str] = LOADED_TABLES) -> Iterator[list[str]]:
    """The tables' secondary indexes dropped for the block, then built again as they were
    (a unique one fails to build if the load broke its uniqueness); yields their names."""
    with psycopg.connect(url, autocommit=True) as conn:
        found = conn.execute(SECONDARY_INDEXES, (list(tables),)).fetchall()
        for name, _ in found:
            conn.execute(f"DROP INDEX {name}")
    yield [name for name, _ in found]
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SET maintenance_work_mem = '256MB'")
        for _, definition in found:
            conn.execute(definition)


def rounds(the_plan: Plan, events: int = FLUSH_EVENTS) -> list[list[tuple[str, str, int]]]:
    """The plan's sessions in rounds of at least `events` events (a session is never split:
    its hash chain and token totals run on from write to write)."""
    out: list[list[tuple[str, str, int]]] = [[]]
    size = 0
    for session in the_plan.sessions:
        if size >= events:
            out.append([])
            size = 0
        out[-1].append(session)
        size += session[2] + 1
    return [r for r in out if r]


_worker: dict[str, Any] = {}


def _start_worker(settings: Settings) -> None:
    _worker["ledger"] = open_ledger(settings)
    _worker["conn"] = psycopg.connect(settings.database_url)


def _load_round(sessions: list[tuple[str, str, int]]) -> tuple[int, int]:
    events = sum(n + 1 for _, _, n in sessions)
    raw = load(_worker["ledger"], _worker["conn"], Plan(events=events, sessions=sessions))
    return events, raw


def load_parallel(
    settings: Settings, the_plan: Plan, workers: int | None = None, progress: Any = None
) -> int:
    """`load` of the plan by `workers` processes (default: one per core), the secondary
    indexes built after it; returns the raw JSON bytes of the messages."""
    count = workers or os.cpu_count() or 1
    done, raw = 0, 0
    context = multiprocessing.get_context("spawn")  # no connection of the parent inherited
    pool = context.Pool(count, initializer=_start_worker, initargs=(settings,))
    with deferred_indexes(settings.database_url), pool:
        for events, round_raw in pool.imap_unordered(_load_round, rounds(the_plan)):
            done, raw = done + events, raw + round_raw
            if progress is not None:
                progress(done)
    return raw
