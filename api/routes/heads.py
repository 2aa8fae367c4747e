"""The sessions list with each session's head: what the audit viewer's first screen shows
(last activity, message count, status) in one request instead of one per session."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from ..deps import TEXT_PATTERN, LedgerDep, ReaderDep
from ..errors import ERROR_RESPONSES
from ..schemas import SessionSummaries, SessionSummary

router = APIRouter(prefix="/v1/session-heads", tags=["sessions"], responses=ERROR_RESPONSES)


@router.get("", response_model=SessionSummaries)
def list_session_heads(
    ledger: LedgerDep, who: ReaderDep,
    prefix: Annotated[str, Query(max_length=512, pattern=TEXT_PATTERN)] = "",
    cursor: Annotated[str | None, Query(max_length=512, pattern=TEXT_PATTERN,
                                        description="`next_cursor` of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=100)] = 25,
) -> SessionSummaries:  # fmt: skip
    """The caller's tenant's sessions, sorted by key, one page at a time, with their heads."""
    found = ledger.keys(tenant=who.tenant, prefix=prefix, after=cursor, limit=limit + 1)
    page = found[:limit]
    return SessionSummaries(
        sessions=[SessionSummary.of(ledger.head(key, tenant=who.tenant)) for key in page],
        next_cursor=page[-1] if len(found) > limit else None,
    )
