"""Compliance: erase a session (its content destroyed, its audit trail kept), and place
or release a legal hold. Admin keys only; each is an event naming who, why and on what
basis or reference."""

from __future__ import annotations

from fastapi import APIRouter, Response

from ..deps import AdminDep, LedgerDep, SessionKeyDep
from ..errors import ERROR_RESPONSES
from ..responses import etag
from ..schemas import EraseIn, HoldIn, WriteResult

router = APIRouter(prefix="/v1/sessions", tags=["compliance"], responses=ERROR_RESPONSES)


@router.post("/{key}/erase", response_model=WriteResult)
def erase_session(
    key: SessionKeyDep, body: EraseIn, ledger: LedgerDep, who: AdminDep, response: Response
) -> WriteResult:
    """Erase the session: its data key is destroyed and its messages dropped from every
    view; its events and hash chain stay. Afterwards reads answer 410 session_erased.
    409 legal_hold if it is held; 409 encryption_required without a master key."""
    result = ledger.erase(key, reason=body.reason, basis=body.basis, tenant=who.tenant,
                          actor=who.actor)  # fmt: skip
    etag(response, result.version)
    return WriteResult(version=result.version, message_count=0, replayed=result.replayed)


@router.post("/{key}/hold", response_model=WriteResult)
def place_hold(
    key: SessionKeyDep, body: HoldIn, ledger: LedgerDep, who: AdminDep, response: Response
) -> WriteResult:
    """Place a legal hold: the session cannot be erased (nor by retention) until released."""
    result = ledger.place_hold(key, reference=body.reference, reason=body.reason,
                               tenant=who.tenant, actor=who.actor)  # fmt: skip
    etag(response, result.version)
    return WriteResult(version=result.version, message_count=result.message_count,
                       replayed=False)  # fmt: skip


@router.post("/{key}/hold/release", response_model=WriteResult)
def release_hold(
    key: SessionKeyDep, body: HoldIn, ledger: LedgerDep, who: AdminDep, response: Response
) -> WriteResult:
    """Release the legal hold."""
    result = ledger.release_hold(key, reference=body.reference, reason=body.reason,
                                 tenant=who.tenant, actor=who.actor)  # fmt: skip
    etag(response, result.version)
    return WriteResult(version=result.version, message_count=result.message_count,
                       replayed=False)  # fmt: skip
