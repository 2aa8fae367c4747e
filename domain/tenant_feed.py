"""The tenant feed: the events of every session of a tenant, in one order that never
changes once read (the store's commit order, `projections/feed.py`), read from a
position. What the tenant-wide live tail serves."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import groupby
from typing import Any

from eventsourcing.persistence import EventStore

from .addresses import SessionAddresses
from .audit import audit_entry
from .inputs import MAX_KEY_CHARS, check_limit, check_text
from .ports import AuditEntry, FeedRow, SessionViews

MAX_POSITION_CHARS = 64


@dataclass(frozen=True)
class FeedEntry:
    """An event of the feed: where it stands in the feed, its session, the audit entry."""

    position: str
    key: str
    entry: AuditEntry


@dataclass(frozen=True)
class FeedPage:
    """One read of the feed: the tenant's events, and where to read on from (past every
    event the read looked at, which may be past the last entry)."""

    entries: list[FeedEntry]
    position: str
    more: bool  # read on at once
    held_back: bool  # committed events wait for an older transaction: read again soon


class TenantFeed:
    """The tenant feed of the ledger: positions from the views, entries from the events."""

    def __init__(
        self, views: SessionViews, events: EventStore[uuid.UUID], addresses: SessionAddresses
    ) -> None:
        self._views, self._events, self._addresses = views, events, addresses

    def feed_position(self) -> str:
        """The feed's position now: a read from it gets the events committed later."""
        return self._views.feed_position()

    def tenant_events(
        self, *, tenant: str | None = None, prefix: str = "", after: str, limit: int = 100
    ) -> FeedPage:
        """The tenant's events (of sessions whose key starts with `prefix`) that follow
        position `after` in the feed, oldest first; at most `limit` events looked at."""
        check_limit("limit", limit, 1000)
        check_text(prefix, "prefix", MAX_KEY_CHARS, allow_empty=True)
        check_text(after, "position", MAX_POSITION_CHARS)
        scan = self._views.feed_after(self._addresses.tenant(tenant), prefix, after, limit)
        entries: list[FeedEntry] = []
        # A run of one session's rows is a run of its versions: one read of its events.
        for sid, run in groupby(scan.rows, key=lambda r: r.session_id):
            rows: list[FeedRow] = list(run)
            found: Iterable[Any] = self._events.get(  # (each a Session event)
                sid, gt=rows[0].version - 1, lte=rows[-1].version
            )
            by_version = {e.originator_version: e for e in found}
            for row in rows:
                entry = audit_entry(self._views, sid, by_version[row.version])
                entries.append(FeedEntry(row.position, row.key, entry))
        return FeedPage(entries, scan.position, scan.more, scan.held_back)
