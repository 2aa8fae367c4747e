"""Audit search across the tenant's sessions: every change one API key made, or every
event of one type, in a time range (auditor and admin keys), paged by a cursor and
read from an index (projections/audit_search.py), never session by session."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from ..access_logging import AccessLoggedRoute, logged_query
from ..deps import TEXT_PATTERN, ExporterDep, InRange, LedgerDep
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs

router = APIRouter(
    prefix="/v1/events", tags=["audit search"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


class FoundEventOut(BaseModel):
    key: str
    version: int
    event_type: str
    recorded_at: datetime
    actor: str
    reason: str | None


class EventSearchPage(BaseModel):
    events: list[FoundEventOut]
    next_cursor: str | None


class SearchInputs(RouteInputs):
    actor: str | None = Field(None, max_length=256, pattern=TEXT_PATTERN,
                              description="The events of this actor (key:<id>).")  # fmt: skip
    type: str | None = Field(None, max_length=128, pattern=TEXT_PATTERN,
                             description="The events of this type, e.g. "
                             "HistoryCleared.")  # fmt: skip
    start: Annotated[datetime | None, InRange] = Field(
        None, alias="from", description="At or after."
    )
    end: Annotated[datetime | None, InRange] = Field(
        None, alias="to", description="Recorded before."
    )
    prefix: str = Field("", max_length=1024, pattern=TEXT_PATTERN,
                        description="Session keys starting so.")  # fmt: skip
    cursor: str | None = Field(None, max_length=1024, pattern=TEXT_PATTERN,
                               description="next_cursor of the page before.")  # fmt: skip
    limit: int = Field(100, ge=1, le=1000)


@router.get("", response_model=EventSearchPage, dependencies=[Depends(logged_query("search"))])
def search(
    ledger: LedgerDep, who: ExporterDep,
    inputs: Annotated[SearchInputs, Depends(SearchInputs.parse)],
) -> EventSearchPage:  # fmt: skip
    """Events across the caller's tenant, oldest first: name an actor or a type (or both)."""
    found, next_cursor = ledger.views.evidence.search_events(
        who.tenant, actor=inputs.actor, event_type=inputs.type, start=inputs.start,
        end=inputs.end, prefix=inputs.prefix, cursor=inputs.cursor, limit=inputs.limit,
    )  # fmt: skip
    return EventSearchPage(
        events=[FoundEventOut(**vars(e)) for e in found], next_cursor=next_cursor
    )
