"""The sessions list with each session's head: what the audit viewer's first screen shows
(last activity, message count, status) in one request instead of one per session."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import Field

from ..access_logging import AccessLoggedRoute, logged_query
from ..deps import TEXT_PATTERN, LedgerDep, ReaderDep
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import SessionSummaries, SessionSummary

router = APIRouter(
    prefix="/v1/session-heads", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


class HeadsInputs(RouteInputs):
    prefix: str = Field("", max_length=512, pattern=TEXT_PATTERN)
    cursor: str | None = Field(None, max_length=512, pattern=TEXT_PATTERN,
                               description="`next_cursor` of the previous page.")  # fmt: skip
    limit: int = Field(25, ge=1, le=100)


@router.get("", response_model=SessionSummaries, dependencies=[Depends(logged_query("heads"))])
def list_session_heads(
    ledger: LedgerDep, who: ReaderDep,
    inputs: Annotated[HeadsInputs, Depends(HeadsInputs.parse)],
) -> SessionSummaries:  # fmt: skip
    """The caller's tenant's sessions, sorted by key, one page at a time, with their heads."""
    prefix, cursor, limit = inputs.prefix, inputs.cursor, inputs.limit
    found = ledger.keys(tenant=who.tenant, prefix=prefix, after=cursor, limit=limit + 1)
    page = found[:limit]
    return SessionSummaries(
        sessions=[SessionSummary.of(ledger.head(key, tenant=who.tenant)) for key in page],
        next_cursor=page[-1] if len(found) > limit else None,
    )
