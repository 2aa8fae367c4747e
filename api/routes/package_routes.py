"""The tenant-wide export package over HTTP (e-discovery): the same package as
`session-ledger export --tenant`, streamed as a tar while it is built, or the same
sessions as one RSMF file for review tools (auditor and admin keys); entered in the
access log as an export when the stream ends.

A build holds a worker thread, a core and a temporary folder (the tar: a session export
and the CSV; RSMF: the whole file, until it is sent), so a process runs at most
`max_package_builds` at once, tar and RSMF together; one more is refused with
`429 too_many_package_builds`. A build's slot, its folder and its files are given back
when its answer ends, however it ends: sent whole, the client gone, the server stopping
(`ClosingStream`).
"""

from __future__ import annotations

import tempfile
import threading
import weakref
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.datastructures import State

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.package import stream_package
from session_ledger.projections.rsmf import write_rsmf

from ..access_logging import RECORDS_HEADER, AccessLoggedRoute, logged_query
from ..deps import TEXT_PATTERN, ExporterDep, InRange, LedgerDep
from ..http_errors import ERROR_RESPONSES
from ..ratelimit_budget import RateLimited
from ..route_inputs import RouteInputs
from .export_routes import ClosingStream

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
    },
    429: {
        **ERROR_RESPONSES[429],
        "description": f"{ERROR_RESPONSES[429]['description']} Or as many package builds "
        "in flight in the process as it runs at once (too_many_package_builds).",
    },
}
RETRY_AFTER_SECONDS = 5.0  # a refused build may ask again: one may have ended by then


class TooManyPackageBuilds(RateLimited):
    """The process runs as many package builds as it may (HTTP 429,
    `too_many_package_builds`)."""

    code = "too_many_package_builds"


class PackageBuilds:
    """The package builds (tar and RSMF) in flight in one process, at most `limit`."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.running = 0
        self._lock = threading.Lock()

    def take(self) -> Callable[[], None]:
        """A slot, or TooManyPackageBuilds; returns what gives it back (once, any thread;
        again: nothing)."""
        with self._lock:
            if self.running >= self.limit:
                raise TooManyPackageBuilds(
                    f"this server builds {self.limit} packages at once already (the most it "
                    "may); retry in a few seconds", RETRY_AFTER_SECONDS, "package_builds",
                )  # fmt: skip
            self.running += 1
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            with self._lock:
                if not given_back:
                    given_back = True
                    self.running -= 1

        return give_back


_MAKING = threading.Lock()


def package_builds(state: State, limit: int) -> PackageBuilds:
    """The app's count of builds in flight (made on first use)."""
    with _MAKING:
        builds: PackageBuilds | None = getattr(state, "package_builds", None)
        if builds is None:
            builds = state.package_builds = PackageBuilds(limit)
        return builds


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
    app = request.app
    builds = package_builds(app.state, app.state.settings.max_package_builds)
    try:
        give_back = builds.take()
    except TooManyPackageBuilds as refusal:
        app.state.metrics.refusals.labels(refusal.code, refusal.limit).inc()
        raise
    try:
        if inputs.format == "rsmf":
            response = _rsmf(ledger, who.tenant, who.actor, stamp, give_back, prefix=prefix,
                             start=start, end=end, actor=actor)  # fmt: skip
        else:
            chunks = stream_package(
                ledger, who.tenant, exported_by=who.actor, prefix=prefix, start=start,
                end=end, actor=actor, checkpoint_dir=app.state.settings.checkpoint_dir,
                access_log=inputs.access_log,
            )  # fmt: skip
            response = ClosingStream(
                chunks, on_end=give_back, media_type="application/x-tar",
                headers={"Content-Disposition": f'attachment; filename="package-{stamp}.tar"'},
            )  # fmt: skip
    except BaseException:
        give_back()
        raise
    # (an answer dropped unsent, as by an error after this route, gives its slot back too)
    weakref.finalize(response, give_back)
    return response


def _rsmf(
    ledger: Ledger, tenant: str, exported_by: str, stamp: str, give_back: Callable[[], None],
    **query: Any,
) -> StreamingResponse:  # fmt: skip
    """RSMF's headers roll up every event, so the file is made whole (on disk, in this
    worker thread) before its first byte is sent; then sent, and removed when the answer
    ends, however it ends."""
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

    def ended() -> None:
        try:
            folder.cleanup()  # (an answer that never began to send: `sent` never ran)
        finally:
            give_back()

    return ClosingStream(sent(), on_end=ended, media_type="message/rfc822", headers={
        "Content-Disposition": f'attachment; filename="export-{stamp}.rsmf"',
        RECORDS_HEADER: str(summary["events"]),
    })  # fmt: skip
