"""A session's audit trail: its events, oldest first, with actor, reason and changes."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import Field

from ..access_logging import AccessLoggedRoute
from ..auth import READ
from ..deps import BIG, SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import AuditEvent, AuditTrailAnswer
from ..session_responses import etag

router = APIRouter(
    prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


class AuditInputs(RouteInputs):
    after: int = Field(0, ge=0, le=BIG, description="Events after this version.")
    limit: int = Field(100, ge=1, le=1000)


@router.get("/{key}/events", response_model=AuditTrailAnswer)
def get_audit_trail(
    call: Annotated[SessionCall, Depends(on_session(READ, "audit"))], response: Response,
    inputs: Annotated[AuditInputs, Depends(AuditInputs.parse)],
) -> AuditTrailAnswer:  # fmt: skip
    """The session's audit trail: its events, oldest first, with actor, reason and changes."""
    key, who, ledger = call
    limit = inputs.limit
    entries = ledger.audit(key, tenant=who.tenant, after_version=inputs.after, limit=limit)
    # The version after the events are read: no event of the page is newer than the ETag.
    etag(response, ledger.head(key, tenant=who.tenant).version)
    events = [AuditEvent(**vars(e)) for e in entries]
    return AuditTrailAnswer(
        events=events, next_after=events[-1].version if len(events) == limit else None
    )
