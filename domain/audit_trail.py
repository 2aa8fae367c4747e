"""A session's audit trail (each event as who changed what, when and why) and the check
of its hash chain against the stored events."""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from eventsourcing.persistence import AggregateRecorder, EventStore

from .addresses import SessionAddresses
from .audit import audit_entry
from .errors import SessionNotFound
from .inputs import check_int, check_limit
from .integrity import verify_chain
from .ports import AuditEntry, ChainReport, SessionViews


class AuditTrail:
    """The trail of a session's events, and the check of its hash chain: heads from the
    views, events from the event store, their stored records from the recorder."""

    def __init__(
        self, views: SessionViews, events: EventStore[uuid.UUID], recorder: AggregateRecorder,
        addresses: SessionAddresses,
    ) -> None:  # fmt: skip
        self._views, self._events, self._recorder = views, events, recorder
        self._addresses = addresses

    def audit(
        self, key: str, *, tenant: str | None = None, after_version: int = 0, limit: int = 100
    ) -> list[AuditEntry]:
        """The session's events after `after_version`, oldest first: who changed what, when."""
        check_int("after_version", after_version, least=0)
        check_limit("limit", limit, 1000)
        sid = self._addresses.session_id(key, tenant)
        if self._views.session_head(sid) is None:
            raise SessionNotFound(self._addresses.tenant(tenant), key)
        events: Iterable[Any] = self._events.get(sid, gt=after_version or None, limit=limit)
        return [audit_entry(self._views, sid, e) for e in events]  # (each a Session event)

    def verify(
        self, key: str, *, tenant: str | None = None, pinned: Mapping[int, bytes] | None = None
    ) -> ChainReport:
        """Recompute the session's hash chain from its stored events and compare it with
        the hashes stored as they were written; the report names the first version that
        differs. Reads a page of events at a time. `pinned`: heads (by version) that the
        chain must pass through, from signed checkpoints (integrity.verify_chain)."""
        sid = self._addresses.session_id(key, tenant)
        head = self._views.session_head(sid)
        if head is None:
            raise SessionNotFound(self._addresses.tenant(tenant), key)

        def records(after: int, limit: int) -> list[tuple[int, str, bytes]]:
            page = self._recorder.select_events(sid, gt=after or None, limit=limit)
            return [(r.originator_version, r.topic, r.state) for r in page]

        def hashes(after: int, limit: int) -> list[tuple[int, bytes | None]]:
            return self._views.stored_chain(sid, after, limit)

        return verify_chain(sid, head.tenant, key, head.version, records, hashes, pinned)

    def verify_all(self) -> Iterator[ChainReport]:
        """`verify` of every session of every tenant, in (tenant, key) order."""
        after: tuple[str, str] | None = None
        while page := self._views.all_sessions(after, 1000):
            for tenant, key in page:
                yield self.verify(key, tenant=tenant)
            after = page[-1]
