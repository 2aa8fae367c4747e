"""Integrity on request: a session's hash chain recomputed from its stored events."""

from __future__ import annotations

from fastapi import APIRouter

from ..deps import ReadCall
from ..errors import ERROR_RESPONSES
from ..schemas import ChainCheck

router = APIRouter(prefix="/v1/sessions", tags=["integrity"], responses=ERROR_RESPONSES)


@router.get("/{key}/verify", response_model=ChainCheck)
def verify_session(call: ReadCall) -> ChainCheck:
    """Recompute the session's hash chain and compare it with the hashes stored as its
    events were written; names the first version that differs."""
    key, who, ledger = call
    report = ledger.verify(key, tenant=who.tenant)
    return ChainCheck(
        intact=report.intact, versions=report.versions, head=report.head,
        first_bad_version=report.first_bad_version, problem=report.problem,
    )  # fmt: skip
