"""The evidence beside the views (the domain's `EvidenceStore`), through the store's
dialect: the access log (`access_log.py`), the audit search (`audit_search.py`), the
tenants' session heads that a checkpoint signs, and the stored events' sizes that an
export pages by."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from session_ledger.domain.ports import AccessEntry, FoundEvent

from . import access_log, audit_search
from .dialect import Dialect, ViewRows
from .timeline import Timeline


class EvidenceRows:
    """The evidence of one store: each call one read or one append."""

    def __init__(self, dialect: Dialect, rows: ViewRows, timeline: Timeline) -> None:
        self.dialect = dialect
        self.rows = rows
        self.tenants = timeline.tenants
        self.tenant_heads = timeline.tenant_heads

    def record_access(
        self, tenant: str, actor: str, role: str, action: str, session_key: str | None,
        parameters: dict[str, Any], records: int, now: datetime | None = None,
    ) -> AccessEntry:  # fmt: skip
        return access_log.record_access(self, tenant, actor, role, action, session_key,
                                        parameters, records, now)  # fmt: skip

    def access_entries(self, tenant: str, after: int, limit: int) -> list[AccessEntry]:
        return access_log.access_entries(self, tenant, after, limit)

    def others_follow(self, tenant: str, after: int, reader: str) -> bool:
        return access_log.others_follow(self, tenant, after, reader)

    def session_entries(
        self, tenant: str, key: str, after: int, up_to: int, limit: int
    ) -> list[tuple[AccessEntry, bytes]]:
        return access_log.session_entries(self, tenant, key, after, up_to, limit)

    def access_head(self, tenant: str) -> tuple[int, bytes]:
        return access_log.access_head(self, tenant)

    def search_events(
        self, tenant: str, *, actor: str | None = None, event_type: str | None = None,
        start: datetime | None = None, end: datetime | None = None, prefix: str = "",
        cursor: str | None = None, limit: int = 100,
    ) -> tuple[list[FoundEvent], str | None]:  # fmt: skip
        return audit_search.search_events(self, tenant, actor=actor, event_type=event_type,
                                          start=start, end=end, prefix=prefix, cursor=cursor,
                                          limit=limit)  # fmt: skip

    def event_sizes(self, session_id: uuid.UUID, after: int, upto: int, limit: int) -> list[int]:
        """The stored sizes (bytes of state) of the session's events after version `after`,
        up to `upto`, at most `limit` of them, in order: what a read of them would hold."""
        d = self.dialect
        with d.reading() as read:
            rows = read.tuples(
                "SELECT length(state) FROM ledger_events WHERE originator_id = ? AND "
                "originator_version > ? AND originator_version <= ? "
                "ORDER BY originator_version LIMIT ?",
                (d.sid(session_id), after, upto, limit),
            )
        return [int(size) for (size,) in rows]
