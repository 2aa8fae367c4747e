"""Compliance: erase a session (its content destroyed, its audit trail kept), and place
or release legal holds, each by its reference. Admin keys only; each is an event naming
who, why and on what basis or reference."""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

from fastapi import APIRouter, Body, Depends, Response
from pydantic import Field

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import WriteResult

from ..deps import AdminCall, WriteHeadersDep, WriteRequestOptions
from ..http_errors import ERROR_RESPONSES
from ..large_bodies import LargeBodyRoute
from ..route_inputs import RouteInputs
from ..schemas import EraseIn, HoldIn, WriteAnswer
from ..session_responses import written

router = APIRouter(
    prefix="/v1/sessions", tags=["compliance"], responses=ERROR_RESPONSES,
    route_class=LargeBodyRoute,  # (its JSON decoded as every write's: a repeated key refused)
)  # fmt: skip


@router.post("/{key}/erase", response_model=WriteAnswer)
def erase_session(call: AdminCall, body: EraseIn, options: WriteHeadersDep) -> Response:
    """Erase the session: its data key is destroyed and its messages dropped from every
    view; its events and hash chain stay. Afterwards reads answer 410 session_erased (a
    retry under its Idempotency-Key: the erasure's answer again, replayed). 409
    legal_hold if it is held; 409 encryption_required without a master key."""
    return _compliance_write(call, options, lambda ledger, key, kw: ledger.erase(
        key, reason=body.reason, basis=body.basis, **kw))  # fmt: skip


def _compliance_write(
    call: AdminCall, options: WriteRequestOptions,
    command: Callable[[Ledger, str, dict[str, Any]], WriteResult],
) -> Response:  # fmt: skip
    """`command(ledger, key, kwargs)`, with the write's headers (If-Match, If-None-Match,
    Idempotency-Key) as every write takes them; the reason is the body's."""
    key, who, ledger = call
    options.check_exists(ledger, key, who.tenant)
    return written(command(ledger, key, options.conditions(who)))


class EraseInputs(RouteInputs):
    erase: bool = Field(False, description="Must be true: a session is erased, never "
                        "deleted (its events and hash chain stay).")  # fmt: skip
    reason: str | None = Field(None, min_length=1, max_length=4096)
    basis: str | None = Field(None, min_length=1, max_length=4096)


@router.delete("/{key}", response_model=WriteAnswer)
def delete_session(
    call: AdminCall, options: WriteHeadersDep,
    inputs: Annotated[EraseInputs, Depends(EraseInputs.parse)],
    body: Annotated[EraseIn | None, Body()] = None,
) -> Response:  # fmt: skip
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
    return erase_session(call, body, options)


@router.post("/{key}/hold", response_model=WriteAnswer)
def place_hold(call: AdminCall, body: HoldIn, options: WriteHeadersDep) -> Response:
    """Place a legal hold under a reference (a matter), beside any others: the session
    cannot be erased (nor by retention) until every hold is released. 409 hold_conflict
    if it is held under this reference already."""
    return _compliance_write(call, options, lambda ledger, key, kw: ledger.place_hold(
        key, reference=body.reference, reason=body.reason, **kw))  # fmt: skip


@router.post("/{key}/hold/release", response_model=WriteAnswer)
def release_hold(call: AdminCall, body: HoldIn, options: WriteHeadersDep) -> Response:
    """Release the hold placed under this reference; the others stay. 404
    hold_not_found if the session holds none under it (`details.holds` lists those held)."""
    return _compliance_write(call, options, lambda ledger, key, kw: ledger.release_hold(
        key, reference=body.reference, reason=body.reason, **kw))  # fmt: skip
