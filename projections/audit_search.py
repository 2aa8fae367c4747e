"""Audit search across a tenant's sessions: the events of one actor, or of one type, in a
time range, read from an index of the timeline in (time, session, version) order.

Two indexes serve it, `(actor, recorded_at, session_id, version)` and
`(event_type, recorded_at, session_id, version)`: a search walks the range of one of them
in order and stops after a page, never session by session. A search names an actor or a
type so that one of them applies (actors are API keys, each of one tenant, so an actor's
range holds that tenant's rows only). The type index leaves out the types of the frequent
writes (`sql.UNINDEXED_TYPES`: a put, a stream's chunk), so that a put adds one index
entry, not two: a search for one of those types with no actor reads the timeline whole
and sorts what it finds (with an actor, the actor's index serves it as any other).
"""

from __future__ import annotations

import base64
import json
import uuid
from datetime import UTC, datetime
from typing import Any

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ports import FoundEvent

from .dialect import SQLStore
from .sql import INDEXED_TYPE, MAX_CHAR, UNINDEXED_TYPES

FAR_PAST = datetime.fromisoformat("0001-01-01T00:00:00+00:00")
FAR_FUTURE = datetime.fromisoformat("9999-12-31T23:59:59+00:00")


def search_events(
    views: SQLStore,
    tenant: str,
    *,
    actor: str | None = None,
    event_type: str | None = None,
    start: datetime | None = None,
    end: datetime | None = None,
    prefix: str = "",
    cursor: str | None = None,
    limit: int = 100,
) -> tuple[list[FoundEvent], str | None]:
    """A page of the tenant's events of `actor` and/or `event_type`, recorded in [start,
    end), of sessions whose key starts with `prefix`, oldest first; and the cursor of the
    next page (None: no more)."""
    if actor is None and event_type is None:
        raise InvalidInput("an audit search names an actor or an event type (or both)")
    start, end = (None if t is None else t if t.tzinfo else t.replace(tzinfo=UTC)
                  for t in (start, end))  # a time without a zone is UTC  # fmt: skip
    column, value = ("t.actor", actor) if actor is not None else ("t.event_type", event_type)
    first = (views.dialect.time(FAR_PAST), views.dialect.sid(uuid.UUID(int=0)), 0)
    after = _cursor(views, cursor) if cursor else first
    also = " AND t.event_type = ?" if actor is not None and event_type is not None else ""
    if actor is None and event_type not in UNINDEXED_TYPES:  # the type index's own terms
        also = " AND " + INDEXED_TYPE.replace("event_type", "t.event_type")
    sql = (
        "SELECT s.session_key, t.session_id, t.version, t.event_type, t.recorded_at, t.actor, "
        "t.reason FROM ledger_timeline t JOIN ledger_sessions s ON s.session_id = t.session_id "
        f"WHERE {column} = ? AND t.recorded_at >= ? AND t.recorded_at < ?{also} "
        "AND (t.recorded_at, t.session_id, t.version) > (?, ?, ?) "
        "AND s.tenant = ? AND s.session_key >= ? AND s.session_key < ? "
        "ORDER BY t.recorded_at, t.session_id, t.version LIMIT ?"
    )
    params: list[Any] = [
        value,
        views.dialect.time(start or FAR_PAST),
        views.dialect.time(end or FAR_FUTURE),
    ]
    params += [event_type] if actor is not None and event_type is not None else []
    params += [*after, tenant, prefix, prefix + MAX_CHAR, limit]
    with views.dialect.reading() as read:
        rows = views.rows.fetch(read, sql, params)
    found = [
        FoundEvent(
            r["session_key"],
            r["version"],
            r["event_type"],
            views.dialect.datetime(r["recorded_at"]),
            r["actor"],
            r["reason"],
        )
        for r in rows
    ]
    if len(rows) < limit:
        return found, None
    last = rows[-1]
    position = [views.dialect.datetime(last["recorded_at"]).isoformat(), str(last["session_id"]),
                last["version"]]  # fmt: skip
    return found, base64.urlsafe_b64encode(json.dumps(position).encode()).decode()


def _cursor(views: SQLStore, cursor: str) -> tuple[Any, Any, int]:
    """The position a cursor of `search_events` names; InvalidInput for any other string
    (a forged one too: a version no column holds, a moment outside years 1 to 9999)."""
    try:
        moment, sid, version = json.loads(base64.urlsafe_b64decode(cursor.encode()))
        when = datetime.fromisoformat(moment)
        if type(version) is not int or not 0 <= version < 2**63 or when.tzinfo is None:
            raise TypeError
        return (
            views.dialect.time(when.astimezone(UTC)),
            views.dialect.sid(uuid.UUID(sid)),
            version,
        )
    except (ValueError, TypeError, OverflowError, AttributeError):  # (a forged one's)
        raise InvalidInput("cursor is not one this search returned") from None
