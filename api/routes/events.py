"""A session's audit trail: its events, oldest first, with actor, reason and changes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Query, Response

from ..access_log import AccessLoggedRoute
from ..auth import READ
from ..deps import BIG, SessionCall, on_session
from ..errors import ERROR_RESPONSES
from ..responses import etag
from ..schemas import AuditEvent, AuditTrail

router = APIRouter(
    prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


@router.get("/{key}/events", response_model=AuditTrail)
def get_audit_trail(
    call: Annotated[SessionCall, Depends(on_session(READ, "audit"))], response: Response,
    after: Annotated[int, Query(ge=0, le=BIG, description="Events after this version.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditTrail:  # fmt: skip
    """The session's audit trail: its events, oldest first, with actor, reason and changes."""
    key, who, ledger = call
    etag(response, ledger.head(key, tenant=who.tenant).version)
    entries = ledger.audit(key, tenant=who.tenant, after_version=after, limit=limit)
    events = [AuditEvent(**vars(e)) for e in entries]
    return AuditTrail(
        events=events, next_after=events[-1].version if len(events) == limit else None
    )
