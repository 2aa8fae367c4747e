"""The tenant feed: every session's events in one order that never changes once read,
so a tenant-wide live tail resumes from a position with no gap and no duplicate.

SQLite runs one writer at a time, so an event's rowid is its commit order: a position is
the last rowid delivered. PostgreSQL writers take no lock (`postgres.py`), and an event's
`notification_id` is taken inside its transaction: a transaction that took a smaller id
may commit after one that took a larger id, and a reader that had moved past the larger
would never see the smaller one. So each event row records the id of its transaction
(`tx`, a column default of `pg_current_xact_id()`, made by its migration), the feed is in
(tx, notification_id) order, and a read delivers only the rows of transactions below its
snapshot's xmin: every transaction below xmin has ended, so no row can ever appear before
a position once a read passed it. A position is `<tx>.<notification_id>`. The price: an
event waits until every transaction that began writing before it has ended (a long
writing transaction anywhere in the server holds the feed back; it never loses an event).
Events stored before that migration have no `tx` and are not in the feed.
"""

from __future__ import annotations

import re
import uuid
from typing import Protocol

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ports import FeedRow, FeedScan

from .dialect import Dialect
from .sql import prefix_upper_bound

SQLITE_POSITION = re.compile(r"\d{1,19}")
POSTGRES_POSITION = re.compile(r"(\d{1,20})\.(\d{1,19})")


def _session_filter(alias: str, tenant: str, prefix: str) -> tuple[str, tuple[object, ...]]:
    """SQL that is true for a session row of `tenant` whose key starts with `prefix`."""
    bound = prefix_upper_bound(prefix)
    upper, below = ((), "") if bound is None else ((bound,), f" AND {alias}.session_key < ?")
    return (
        f"({alias}.tenant = ? AND {alias}.session_key >= ?{below}"
        f" AND substr({alias}.session_key, 1, ?) = ?)",
        (tenant, prefix, *upper, len(prefix), prefix),
    )


class Feed(Protocol):
    """The tenant feed of one store."""

    def feed_position(self) -> str: ...

    def feed_after(self, tenant: str, prefix: str, position: str, limit: int) -> FeedScan: ...


class SQLiteFeed:
    """The feed in rowid order (SQLite commits one writer at a time)."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def feed_position(self) -> str:
        """The position of the newest event: a tail that starts here sees what follows."""
        with self.dialect.reading() as read:
            rows = read.tuples("SELECT max(rowid) FROM ledger_events", ())
        return str(rows[0][0] or 0)

    def feed_after(self, tenant: str, prefix: str, position: str, limit: int) -> FeedScan:
        """The tenant's events (keys starting with `prefix`) among the next `limit`
        events of the feed after `position`, and where the scan stopped."""
        if SQLITE_POSITION.fullmatch(position) is None:
            raise InvalidInput(f"not a position of this store's feed: {position!r}")
        after = int(position)
        mine, params = _session_filter("s", tenant, prefix)
        with self.dialect.reading() as read:
            newest = read.tuples("SELECT max(rowid) FROM ledger_events", ())[0][0] or 0
            if after > newest:
                raise InvalidInput(f"position {position!r} is past this store's newest event")
            rows = read.tuples(
                f"SELECT e.rowid, e.originator_id, e.originator_version, s.session_key, {mine} "
                "FROM (SELECT rowid, originator_id, originator_version FROM ledger_events "
                "WHERE rowid > ? ORDER BY rowid LIMIT ?) e "
                "LEFT JOIN ledger_sessions s ON s.session_id = e.originator_id ORDER BY e.rowid",
                (*params, after, limit),
            )
        found = [
            FeedRow(str(at), uuid.UUID(str(sid)), key, version)
            for at, sid, version, key, ours in rows
            if ours
        ]
        end = str(rows[-1][0]) if rows else position
        return FeedScan(found, end, more=len(rows) == limit, held_back=False)


class PostgresFeed:
    """The feed in (transaction id, notification id) order, below the snapshot's xmin."""

    def __init__(self, dialect: Dialect) -> None:
        self.dialect = dialect

    def feed_position(self) -> str:
        """A position before every transaction still running: a tail that starts here
        sees those and all later ones."""
        with self.dialect.reading() as read:
            rows = read.tuples("SELECT pg_snapshot_xmin(pg_current_snapshot())::text", ())
        return f"{rows[0][0]}.0"

    def feed_after(self, tenant: str, prefix: str, position: str, limit: int) -> FeedScan:
        """The tenant's events (keys starting with `prefix`) among the next `limit`
        events of the feed after `position` whose transactions have ended, and where the
        scan stopped. `held_back`: events committed after `position` wait for an older
        transaction still running (look again soon)."""
        parsed = POSTGRES_POSITION.fullmatch(position)
        if parsed is None:
            raise InvalidInput(f"not a position of this store's feed: {position!r}")
        tx, nid = parsed.group(1), int(parsed.group(2))
        mine, params = _session_filter("s", tenant, prefix)
        with self.dialect.snapshot() as read:  # one snapshot: xmin and the rows agree
            ((xmin, xmax, held),) = read.tuples(
                "SELECT pg_snapshot_xmin(n)::text, pg_snapshot_xmax(n)::text, EXISTS (SELECT 1"
                " FROM ledger_events WHERE tx >= pg_snapshot_xmin(n)) FROM pg_current_snapshot() n",
                (),
            )
            if int(tx) > int(xmax):
                raise InvalidInput(f"position {position!r} is past this store's newest event")
            rows = read.tuples(
                "SELECT e.tx::text, e.notification_id, e.originator_id, e.originator_version,"
                f" s.session_key, {mine} FROM (SELECT tx, notification_id, originator_id,"
                " originator_version FROM ledger_events WHERE (tx, notification_id) >"
                " (?::xid8, ?) AND tx < ?::xid8 ORDER BY tx, notification_id LIMIT ?) e"
                " LEFT JOIN ledger_sessions s ON s.session_id = e.originator_id"
                " ORDER BY e.tx, e.notification_id",
                (*params, tx, nid, xmin, limit),
            )
        found = [
            FeedRow(f"{t}.{n}", sid, key, version) for t, n, sid, version, key, ours in rows if ours
        ]
        end = f"{rows[-1][0]}.{rows[-1][1]}" if rows else position
        return FeedScan(found, end, more=len(rows) == limit, held_back=bool(held))
