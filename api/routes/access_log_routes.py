"""The tenant's access log: who read or exported which session, when, with which
parameters, and how many records (auditor and admin keys). Reading it is itself entered
in it, after the page is read: a page never holds the entry of its own read."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends
from pydantic import BaseModel, Field

from session_ledger.projections.access_log import LOG_READ, verify_access_log

from ..access_logging import AccessLoggedRoute, logged_query
from ..deps import BIG, ExporterDep, LedgerDep
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs

router = APIRouter(
    prefix="/v1/access-log", tags=["access log"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


class AccessLogEntry(BaseModel):
    seq: int
    recorded_at: str
    actor: str
    role: str
    action: str
    session_key: str | None
    parameters: dict[str, object]
    records: int
    chain: str


class AccessLogPage(BaseModel):
    entries: list[AccessLogEntry]
    next_after: int | None
    problems: list[str] | None = None


class AccessLogInputs(RouteInputs):
    after: int = Field(0, ge=0, le=BIG, description="Entries after this number.")
    limit: int = Field(100, ge=1, le=1000)
    verify: bool = Field(False, description="Also recompute the whole chain.")


@router.get("", response_model=AccessLogPage, dependencies=[Depends(logged_query(LOG_READ))])
def access_log(
    ledger: LedgerDep, who: ExporterDep,
    inputs: Annotated[AccessLogInputs, Depends(AccessLogInputs.parse)],
) -> AccessLogPage:  # fmt: skip
    """The caller's tenant's access log, oldest first, a page at a time; `next_after` is
    null once nothing follows but the caller's own reads of the log (each read is entered,
    after its page). With `verify`, the problems found recomputing its hash chain (an
    empty list: intact)."""
    evidence = ledger.views.evidence
    after, limit = inputs.after, inputs.limit
    entries = evidence.access_entries(who.tenant, after, limit)
    more = len(entries) == limit and evidence.others_follow(who.tenant, entries[-1].seq, who.actor)
    return AccessLogPage(
        entries=[AccessLogEntry(**{k: v for k, v in vars(e).items() if k != "tenant"})
                 for e in entries],
        next_after=entries[-1].seq if more else None,
        problems=list(verify_access_log(evidence, who.tenant)) if inputs.verify else None,
    )  # fmt: skip
