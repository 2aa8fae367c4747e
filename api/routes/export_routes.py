"""The compliance export: one session's verifiable transcript, streamed (auditors and
admins only; an agent's key gets 403).

The session and version are checked before the answer starts, so an unknown session is
a plain 404; the body is then read from the store a page at a time in worker threads
(Starlette iterates a plain iterator off the event loop), never whole in memory.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import Field

from session_ledger.projections.export import export_csv, export_jsonl, plan_export, plan_proof
from session_ledger.projections.tar_stream import chunks  # one hand-off per chunk, not per line

from ..access_logging import AccessLoggedRoute
from ..auth import EXPORT
from ..deps import AsOfVersion, SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs

router = APIRouter(
    prefix="/v1/sessions", tags=["export"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
MEDIA_TYPES = {"jsonl": "application/x-ndjson", "csv": "text/csv; charset=utf-8"}
EXPORT_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The export: JSONL (header, one line per event with its stored "
        "record and chain hash, trailer) or CSV (the history, one row per message).",
        "content": {
            "application/x-ndjson": {"schema": {"type": "string"}},
            "text/csv": {"schema": {"type": "string"}},
        },
    }
}


class ExportInputs(RouteInputs):
    format: Literal["jsonl", "csv"] = Field(
        "jsonl",
        description="jsonl: every event with its stored record and hash chain, verifiable "
        "offline (`session-ledger verify-export`); csv: the history, one row per message.",
    )
    as_of_version: AsOfVersion = None
    access_log: bool = Field(
        False,
        description="jsonl: also the access log's entries about this session (who read or "
        "exported it), each with its hash and its predecessor's.",
    )


@router.get(
    "/{key}/export", response_class=StreamingResponse, responses=EXPORT_RESPONSES
)  # fmt: skip
def export_session(
    request: Request, call: Annotated[SessionCall, Depends(on_session(EXPORT, "export"))],
    inputs: Annotated[ExportInputs, Depends(ExportInputs.parse)],
) -> StreamingResponse:  # fmt: skip
    """Export the session's transcript for compliance, streamed (auditor and admin keys)."""
    key, who, ledger = call
    format, as_of_version, access_log = inputs.format, inputs.as_of_version, inputs.access_log
    plan = plan_export(ledger, key, tenant=who.tenant, as_of_version=as_of_version,
                       access_log=access_log and format == "jsonl")  # fmt: skip
    if format == "jsonl":
        proof = plan_proof(plan, request.app.state.settings.checkpoint_dir)
        lines = export_jsonl(ledger, plan, proof=proof)
    else:
        lines = export_csv(ledger, plan)
    filename = f"session-{plan.session_id}-v{plan.to_version}.{format}"
    return StreamingResponse(
        chunks(lines),
        media_type=MEDIA_TYPES[format],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
