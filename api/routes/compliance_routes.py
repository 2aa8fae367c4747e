"""Compliance: erase a session (its content destroyed, its audit trail kept), and place
or release legal holds, each by its reference. Admin keys only; each is an event naming
who, why and on what basis or reference."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Body, Depends, Response
from pydantic import Field

from session_ledger.domain.errors import InvalidInput

from ..deps import AdminCall
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import EraseIn, HoldIn, WriteAnswer
from ..session_responses import etag, written

router = APIRouter(prefix="/v1/sessions", tags=["compliance"], responses=ERROR_RESPONSES)


@router.post("/{key}/erase", response_model=WriteAnswer)
def erase_session(call: AdminCall, body: EraseIn, response: Response) -> WriteAnswer:
    """Erase the session: its data key is destroyed and its messages dropped from every
    view; its events and hash chain stay. Afterwards reads answer 410 session_erased.
    409 legal_hold if it is held; 409 encryption_required without a master key."""
    key, who, ledger = call
    result = ledger.erase(key, reason=body.reason, basis=body.basis, tenant=who.tenant,
                          actor=who.actor)  # fmt: skip
    etag(response, result.version)
    return WriteAnswer(version=result.version, message_count=0, replayed=result.replayed)


class EraseInputs(RouteInputs):
    erase: bool = Field(False, description="Must be true: a session is erased, never "
                        "deleted (its events and hash chain stay).")  # fmt: skip
    reason: str | None = Field(None, min_length=1, max_length=4096)
    basis: str | None = Field(None, min_length=1, max_length=4096)


@router.delete("/{key}", response_model=WriteAnswer)
def delete_session(
    call: AdminCall, response: Response,
    inputs: Annotated[EraseInputs, Depends(EraseInputs.parse)],
    body: Annotated[EraseIn | None, Body()] = None,
) -> WriteAnswer:  # fmt: skip
    """`?erase=true`: the same as `POST .../erase`, with `reason` and `basis` in the query
    or in the body. Without it nothing is deleted (422): events are never deleted."""
    erase, reason, basis = inputs.erase, inputs.reason, inputs.basis
    if not erase:
        raise InvalidInput("a session's events are never deleted: DELETE "
                           "/v1/sessions/{key}?erase=true erases its content (admin), "
                           "DELETE /v1/sessions/{key}/messages clears its history")  # fmt: skip
    if body is not None and (reason is not None or basis is not None):
        raise InvalidInput("give reason and basis in the query or in the body, not both")
    if body is None:
        if reason is None or basis is None:
            raise InvalidInput("erasing needs a reason and a legal basis (query parameters "
                               "`reason` and `basis`, or a JSON body with both)")  # fmt: skip
        body = EraseIn(reason=reason, basis=basis)
    return erase_session(call, body, response)


@router.post("/{key}/hold", response_model=WriteAnswer)
def place_hold(call: AdminCall, body: HoldIn) -> Response:
    """Place a legal hold under a reference (a matter), beside any others: the session
    cannot be erased (nor by retention) until every hold is released. 409 hold_conflict
    if it is held under this reference already."""
    key, who, ledger = call
    result = ledger.place_hold(key, reference=body.reference, reason=body.reason,
                               tenant=who.tenant, actor=who.actor)  # fmt: skip
    return written(result)


@router.post("/{key}/hold/release", response_model=WriteAnswer)
def release_hold(call: AdminCall, body: HoldIn) -> Response:
    """Release the hold placed under this reference; the others stay. 404
    hold_not_found if the session holds none under it (`details.holds` lists those held)."""
    key, who, ledger = call
    result = ledger.release_hold(key, reference=body.reference, reason=body.reason,
                                 tenant=who.tenant, actor=who.actor)  # fmt: skip
    return written(result)
