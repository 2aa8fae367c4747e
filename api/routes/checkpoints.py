"""The tenant's newest signed checkpoint, as written to LEDGER_CHECKPOINT_DIR: what an
auditor keeps outside the service and later checks the store against."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Depends, Request, Response

from session_ledger.domain.errors import CheckpointNotFound
from session_ledger.projections.checkpoint import latest_path

from ..access_logging import AccessLoggedRoute, logged_query
from ..deps import ReaderDep
from ..http_errors import ERROR_RESPONSES

router = APIRouter(
    prefix="/v1/checkpoints", tags=["checkpoints"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
CHECKPOINT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The checkpoint file: the signed tree head, its Ed25519 signature "
        "and every session's (key, version, chain head).",
        "content": {"application/json": {"schema": {"type": "object"}}},
    }
}


@router.get(
    "/latest", response_class=Response, responses=CHECKPOINT_RESPONSES,
    dependencies=[Depends(logged_query("checkpoint"))],
)  # fmt: skip
def latest_checkpoint(request: Request, who: ReaderDep) -> Response:
    """The newest checkpoint of the caller's tenant, byte for byte as signed and kept."""
    path = latest_path(request.app.state.settings.checkpoint_dir, who.tenant)
    if path is None:
        raise CheckpointNotFound(f"tenant {who.tenant!r} has no checkpoint yet")
    return Response(path.read_bytes(), media_type="application/json")
