"""The tenant-wide export package over HTTP (e-discovery): the same package as
`session-ledger export --tenant`, streamed as a tar while it is built, or the same
sessions as one RSMF file for review tools (auditor and admin keys); entered in the
access log as an export when the stream ends."""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import Field

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.package import stream_package
from session_ledger.projections.rsmf import write_rsmf

from ..access_logging import RECORDS_HEADER, AccessLoggedRoute, logged_query
from ..deps import TEXT_PATTERN, ExporterDep, InRange, LedgerDep
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs

router = APIRouter(
    prefix="/v1/package", tags=["export"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
PACKAGE_RESPONSES: dict[int | str, dict[str, Any]] = {
    200: {
        "description": "The package as a tar: sessions/NNNNNN.jsonl (each selected "
        "session's verifiable export), events.csv, manifest.json and manifest.sha256; "
        "`session-ledger verify-export FILE.tar` checks it offline.",
        "content": {
            "application/x-tar": {"schema": {"type": "string", "format": "binary"}},
            "message/rfc822": {"schema": {"type": "string", "format": "binary"}},
        },
    }
}


class PackageInputs(RouteInputs):
    prefix: str = Field("", max_length=1024, pattern=TEXT_PATTERN,
                        description="Sessions whose key starts so.")  # fmt: skip
    start: Annotated[datetime | None, InRange] = Field(
        None, alias="from", description="Sessions changed at or after."
    )
    end: Annotated[datetime | None, InRange] = Field(
        None, alias="to", description="Sessions changed before."
    )
    actor: str | None = Field(None, max_length=256, pattern=TEXT_PATTERN,
                              description="Sessions this actor changed (in the range "
                              "given).")  # fmt: skip
    access_log: bool = Field(False, description="Each session's export also carries the "
                             "access log's entries about it.")  # fmt: skip
    format: Literal["tar", "rsmf"] = Field(
        "tar",
        description="tar: the verifiable package; rsmf: the sessions as one RSMF 2.0 file "
        "(conversations of messages, for review tools; no proofs).",
    )


@router.get(
    "", response_class=StreamingResponse, responses=PACKAGE_RESPONSES,
    dependencies=[Depends(logged_query("export"))],
)  # fmt: skip
def export_package(
    request: Request, ledger: LedgerDep, who: ExporterDep,
    inputs: Annotated[PackageInputs, Depends(PackageInputs.parse)],
) -> StreamingResponse:  # fmt: skip
    """Export every session of the caller's tenant the query selects, as one verifiable
    package, streamed (auditor and admin keys)."""
    prefix, actor = inputs.prefix, inputs.actor
    start, end = (m and (m if m.tzinfo else m.replace(tzinfo=UTC))
                  for m in (inputs.start, inputs.end))  # fmt: skip
    if start is not None and end is not None and start >= end:
        raise InvalidInput("`from` must be before `to`")
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    if inputs.format == "rsmf":
        return _rsmf(ledger, who.tenant, who.actor, stamp, prefix=prefix, start=start,
                     end=end, actor=actor)  # fmt: skip
    chunks = stream_package(
        ledger, who.tenant, exported_by=who.actor, prefix=prefix, start=start, end=end,
        actor=actor, checkpoint_dir=request.app.state.settings.checkpoint_dir,
        access_log=inputs.access_log,
    )  # fmt: skip
    return StreamingResponse(
        chunks, media_type="application/x-tar",
        headers={"Content-Disposition": f'attachment; filename="package-{stamp}.tar"'},
    )  # fmt: skip


def _rsmf(
    ledger: Ledger, tenant: str, exported_by: str, stamp: str, **query: Any
) -> StreamingResponse:
    """RSMF's headers roll up every event, so the file is made whole (on disk, in this
    worker thread) before its first byte is sent; then sent and removed."""
    folder = tempfile.TemporaryDirectory(prefix="ledger-rsmf-")
    try:
        path = Path(folder.name) / "export.rsmf"
        summary = write_rsmf(ledger, tenant, path, exported_by=exported_by, **query)
    except BaseException:
        folder.cleanup()
        raise

    def sent() -> Iterator[bytes]:
        try:
            with path.open("rb") as f:
                while chunk := f.read(64 * 1024):
                    yield chunk
        finally:
            folder.cleanup()

    return StreamingResponse(sent(), media_type="message/rfc822", headers={
        "Content-Disposition": f'attachment; filename="export-{stamp}.rsmf"',
        RECORDS_HEADER: str(summary["events"]),
    })  # fmt: skip
