"""The session views in SQL, shared by the SQLite and PostgreSQL recorders: one `SQLViews`
object (the domain's `SessionViews`) made of small parts, each given the store's
`Dialect`: the reads of each view (`Context`, `Transcript`, `Timeline`, `StreamsView`, the
tenant feed), the inline writes (`ViewWriter`), the session content's keys
(`SessionContent`), and what `rebuild` and `check` need (emptying, the event log in
order, table dumps). Statements are written with `?` placeholders; a dialect converts
them (`sql.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any, NamedTuple

from eventsourcing.persistence import StoredEvent

from session_ledger.domain.ports import EvidenceStore, ReadRouting

from .bodies import body_json
from .context import Context
from .dialect import Dialect, ViewRows
from .encrypt_existing import ClearSessionSealing
from .evidence_rows import EvidenceRows
from .feed import Feed
from .key_rows import SessionContent
from .sql import Reader, utc_text
from .streams_view import StreamsView
from .timeline import Timeline
from .transcript import Transcript
from .view_writes import ViewWriter


def _portable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, datetime):
        return utc_text(value)
    return value


class ViewParts(NamedTuple):
    """The parts of a store's views, made in the order they use each other."""

    dialect: Dialect
    content: SessionContent
    rows: ViewRows
    context: Context
    transcript: Transcript
    timeline: Timeline
    streams: StreamsView
    feed: Feed
    writer: ViewWriter
    evidence: EvidenceRows


def view_parts(dialect: Dialect, content: SessionContent, feed: Feed) -> ViewParts:
    """The views' parts over `dialect`, with the session content's keys and the store's feed."""
    rows = ViewRows(dialect, content)
    timeline = Timeline(dialect, rows)
    return ViewParts(
        dialect, content, rows, Context(dialect, rows), Transcript(dialect, rows),
        timeline, StreamsView(dialect, content), feed,
        ViewWriter(dialect, rows, content, ClearSessionSealing(dialect, content.data_keys)),
        EvidenceRows(dialect, rows, timeline),
    )  # fmt: skip


class SQLViews:
    """The session views of one store (`SessionViews`): each read answered by its part."""

    view_tables = (
        "ledger_sessions", "ledger_messages", "ledger_ended_messages", "ledger_timeline",
        "ledger_streams",
    )  # fmt: skip
    # (`ledger_data_keys` is no view: rebuild keeps it, the events' content needs it)
    view_order = {
        "ledger_sessions": "session_id",
        "ledger_messages": "session_id, status, message_id",
        "ledger_ended_messages": "session_id, status, message_id, valid_from",
        "ledger_timeline": "session_id, version",
        "ledger_streams": "session_id, stream_id",
    }

    def __init__(self, parts: ViewParts, read_routing: ReadRouting | None = None) -> None:
        """`read_routing`: where the queries may be served instead (PostgreSQL standbys:
        `replicas.py`), which reads the primary through views over the same parts."""
        self.parts = parts
        self.dialect = parts.dialect
        self.rows = parts.rows
        self.writer = parts.writer
        self.content = parts.content
        self.read_routing = read_routing
        # Told each session id and its tenant once its write committed (the live tails' hub).
        self.after_commit: Callable[[uuid.UUID, str], None] | None = None
        context, transcript, timeline = parts.context, parts.transcript, parts.timeline
        streams, feed, content = parts.streams, parts.feed, parts.content
        # The port's reads, each its part's (bound once: a read goes straight there).
        self.context_window = context.context_window
        self.history = transcript.history
        self.history_page = transcript.history_page
        self.ended_at = transcript.ended_at
        self.message_at = transcript.message_at
        self.version_at = timeline.version_at
        self.head_version = timeline.head_version
        self.session_head = timeline.session_head
        self.session_keys = timeline.session_keys
        self.prior_write = timeline.prior_write
        self.stored_chain = timeline.stored_chain
        self.all_sessions = timeline.all_sessions
        self.session_count = timeline.session_count
        self.tenants = timeline.tenants
        self.tenant_heads = timeline.tenant_heads
        self.stream_view = streams.stream_view
        self.idle_streams = streams.idle_streams
        self.feed_position = feed.feed_position
        self.feed_after = feed.feed_after
        self.sealed = content.sealed
        self.keyed_digest = content.keyed_digest
        self.same_request = content.same_request
        self.can_seal = content.can_seal
        # The evidence (the second port), its calls also answered here.
        evidence = parts.evidence
        self.evidence: EvidenceStore = evidence
        self.record_access = evidence.record_access
        self.access_entries = evidence.access_entries
        self.others_follow = evidence.others_follow
        self.session_entries = evidence.session_entries
        self.access_head = evidence.access_head
        self.search_events = evidence.search_events
        self.event_sizes = evidence.event_sizes
        self.snapshot = parts.dialect.snapshot
        self.drop_old_bytes = parts.dialect.drop_old_bytes
        self.drop_erased_keys = parts.dialect.drop_erased_keys

    def close(self) -> None:
        """Close the connections of views that own theirs (a standby's)."""
        self.dialect.close()

    @property
    def rows_read(self) -> int:
        """View rows these views fetched: the cost model the tests check."""
        return self.rows.rows_read

    # -- the live tails' watcher ------------------------------------------------------------

    def last_event_position(self) -> int:
        with self.dialect.reading() as read:
            rows = read.tuples(f"SELECT max({self.dialect.event_position}) FROM ledger_events", ())
        return int(rows[0][0] or 0)

    def events_written_after(self, position: int, limit: int) -> list[tuple[int, uuid.UUID, str]]:
        """(position, session id, tenant) of the events after `position` in the log, in
        log order (on PostgreSQL an id may commit after a higher one: a hint, not a
        cursor)."""
        p = self.dialect.event_position
        with self.dialect.reading() as read:
            rows = read.tuples(
                f"SELECT e.{p}, e.originator_id, s.tenant FROM (SELECT {p}, originator_id"
                f" FROM ledger_events WHERE {p} > ? ORDER BY {p} LIMIT ?) e LEFT JOIN"
                f" ledger_sessions s ON s.session_id = e.originator_id ORDER BY e.{p}",
                (position, limit),
            )
        return [(int(at), uuid.UUID(str(sid)), str(tenant or "")) for at, sid, tenant in rows]

    # -- rebuild ----------------------------------------------------------------------------

    @contextmanager
    def rebuilding(self) -> Iterator[tuple[Any, Reader]]:
        """Empty views in a transaction that holds writers off; readers keep the old ones
        until it commits."""
        with self.dialect.write_transaction() as cursor:
            for table in self.view_tables:
                self.dialect.execute(cursor, f"DELETE FROM {table}", ())
            yield cursor, self.dialect.reader(cursor)

    def stored_events(self, read: Reader, page: int = 1000) -> Iterator[StoredEvent]:
        """Every stored event in log order, read a page at a time through `read`."""
        position, after = self.dialect.event_position, 0
        while True:
            rows = read(
                f"SELECT {position} AS position, originator_id, originator_version, topic, "
                f"state FROM ledger_events WHERE {position} > ? ORDER BY {position} LIMIT ?",
                (after, page),
            )
            for r in rows:
                yield StoredEvent(
                    originator_id=uuid.UUID(str(r["originator_id"])),
                    originator_version=r["originator_version"],
                    topic=r["topic"],
                    state=bytes(r["state"]),
                )
            if len(rows) < page:
                return
            after = rows[-1]["position"]

    def dump(self, table: str) -> Iterator[dict[str, Any]]:
        """A view table's rows in key order, by column, in a form equal across backends
        (and a message body as its canonical JSON, a stream's text as read, whichever
        form a store keeps them in)."""
        with self.dialect.stream(
            f"SELECT * FROM {table} ORDER BY {self.view_order[table]}"
        ) as rows:
            for row in rows:
                # sqlite3.Row iterates its values, psycopg's dict rows their keys
                values = {k: _portable(row[k]) for k in row.keys()}  # noqa: SIM118
                if "message" in values:
                    ((body,),) = self.rows.opened(uuid.UUID(values["session_id"]),
                                                  [(values["message"],)], 0)  # fmt: skip
                    values["message"] = body_json(values["role"], body)
                if table == "ledger_streams":  # a stream's text: its sealed lines opened
                    sid = uuid.UUID(values["session_id"])
                    values["text"] = self.content.open_stream_text(sid, values["text"])
                yield values
