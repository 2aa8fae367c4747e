"""The session views in SQL, shared by the SQLite and PostgreSQL recorders: the reads of
each view (`context`, `transcript`, `timeline`), the inline writes (`view_writes`), and
what `rebuild` and `check` need (emptying, the event log in order, table dumps).
Statements are written with `?` placeholders; a dialect converts them (`sql.py`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime
from typing import Any

from eventsourcing.persistence import StoredEvent

from session_ledger.domain.ports import ReadRouting

from .bodies import body_json
from .context import ContextReads
from .sql import Reader, utc_text
from .timeline import TimelineReads
from .transcript import TranscriptReads
from .view_writes import ViewWrites


def _portable(value: Any) -> Any:
    if isinstance(value, uuid.UUID):
        return value.hex
    if isinstance(value, datetime):
        return utc_text(value)
    return value


class SQLViews(ViewWrites, ContextReads, TranscriptReads, TimelineReads):
    """Reads and inline writes of the views; subclasses supply the SQL dialect."""

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
    event_position = "rowid"  # the column that orders the whole event log
    # Told each session id and its tenant once its write committed (the live tails' hub).
    after_commit: Callable[[uuid.UUID, str], None] | None = None
    # Where the queries may be served instead (PostgreSQL standbys: `replicas.py`).
    read_routing: ReadRouting | None = None

    # -- the live tails' watcher ------------------------------------------------------------

    def last_event_position(self) -> int:
        with self._reading() as read:
            rows = read.tuples(f"SELECT max({self.event_position}) FROM ledger_events", ())
        return int(rows[0][0] or 0)

    def events_written_after(self, position: int, limit: int) -> list[tuple[int, uuid.UUID, str]]:
        """(position, session id, tenant) of the events after `position` in the log, in
        log order (on PostgreSQL an id may commit after a higher one: a hint, not a
        cursor)."""
        p = self.event_position
        with self._reading() as read:
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
        with self._write_transaction() as cursor:
            for table in self.view_tables:
                self._execute(cursor, f"DELETE FROM {table}", ())
            yield cursor, self._reader(cursor)

    def event_sizes(self, session_id: uuid.UUID, after: int, upto: int, limit: int) -> list[int]:
        """The stored sizes (bytes of state) of the session's events after version `after`,
        up to `upto`, at most `limit` of them, in order: what a read of them would hold."""
        with self._reading() as read:
            rows = read.tuples(
                "SELECT length(state) FROM ledger_events WHERE originator_id = ? AND "
                "originator_version > ? AND originator_version <= ? "
                "ORDER BY originator_version LIMIT ?",
                (self._sid(session_id), after, upto, limit),
            )
        return [int(size) for (size,) in rows]

    def stored_events(self, read: Reader, page: int = 1000) -> Iterator[StoredEvent]:
        """Every stored event in log order, read a page at a time through `read`."""
        position, after = self.event_position, 0
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

    def dump(self, table: str) -> Iterator[tuple[Any, ...]]:
        """A view table's rows in key order, in a form equal across backends (and a
        message body as its canonical JSON, a stream's text as read, whichever form a
        store keeps them in)."""
        with self._stream(f"SELECT * FROM {table} ORDER BY {self.view_order[table]}") as rows:
            for row in rows:
                # sqlite3.Row iterates its values, psycopg's dict rows their keys
                values = {k: _portable(row[k]) for k in row.keys()}  # noqa: SIM118
                if "message" in values:
                    ((body,),) = self._opened(uuid.UUID(values["session_id"]),
                                              [(values["message"],)], 0)  # fmt: skip
                    values["message"] = body_json(values["role"], body)
                if table == "ledger_streams":  # a stream's text: its sealed lines opened
                    sid = uuid.UUID(values["session_id"])
                    values["text"] = self.open_stream_text(sid, values["text"])
                yield tuple(values.values())
