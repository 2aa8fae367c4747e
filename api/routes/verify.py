"""Integrity on request: a session's hash chain recomputed from its stored events."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends

from ..access_logging import AccessLoggedRoute
from ..auth import READ
from ..deps import SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..schemas import ChainCheck

router = APIRouter(
    prefix="/v1/sessions", tags=["integrity"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


@router.get("/{key}/verify", response_model=ChainCheck)
def verify_session(
    call: Annotated[SessionCall, Depends(on_session(READ, "verify"))],
) -> ChainCheck:
    """Recompute the session's hash chain and compare it with the hashes stored as its
    events were written; names the first version that differs."""
    key, who, ledger = call
    report = ledger.verify(key, tenant=who.tenant)
    return ChainCheck(
        intact=report.intact, versions=report.versions, head=report.head,
        first_bad_version=report.first_bad_version, problem=report.problem,
    )  # fmt: skip
