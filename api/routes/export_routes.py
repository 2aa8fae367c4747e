"""The compliance export: one session's verifiable transcript, streamed (auditors and
admins only; an agent's key gets 403).

The session and version are checked before the answer starts, so an unknown session is
a plain 404; the body is then read from the store a page at a time in worker threads
(Starlette iterates a plain iterator off the event loop), never whole in memory.

A streamed answer is a `ClosingStream`: its iterator is closed when the answer ends,
however it ends (sent whole, the client gone, the server stopping), so what the iterator
holds (a page of events here, a temporary folder and open files for a package) is let go
at once. Starlette's `StreamingResponse` does not: on a disconnect it stops iterating a
plain iterator but never closes it, which leaves it to the garbage collector, if ever.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import AsyncIterable, Callable, Iterator
from typing import Annotated, Any, Literal

import anyio
from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.types import Receive, Scope, Send

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


class ClosingStream(StreamingResponse):
    """A StreamingResponse of a plain iterator (a generator) that is closed when the
    answer ends, however it ends: sent whole, the client gone (Starlette cancels the
    sending, or `send` fails: either way the iterator is left suspended), or the server
    stopping. Closing a generator runs its `finally` and `with` blocks (a temporary
    folder removed, files closed); then each of `on_end` is called (a build's slot given
    back). The body iterator the answer was given (and any wrapper put around it since,
    as the access log's count) is closed first, so its own `finally` runs at once too."""

    def __init__(
        self, content: Iterator[Any], *, on_end: Callable[[], None] | None = None,
        **kwargs: Any,
    ) -> None:  # fmt: skip
        super().__init__(content, **kwargs)
        self._content = content
        self._threaded: AsyncIterable[Any] = self.body_iterator  # Starlette's wrapper
        self._on_end = on_end
        self._ending = threading.Lock()
        self._ended = False

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            try:
                with anyio.CancelScope(shield=True):  # (a stopping server cancels us)
                    for body in dict.fromkeys((self.body_iterator, self._threaded)):
                        aclose = getattr(body, "aclose", None)
                        if aclose is not None:
                            with contextlib.suppress(RuntimeError):  # (one still running)
                                await aclose()
                    await anyio.to_thread.run_sync(self.end)  # (removing files: off the loop)
            finally:
                self.end()  # nothing if ended above; else here, if a cancel cut it short

    def end(self) -> None:
        """Close the iterator and call `on_end`, once (any thread; again: nothing)."""
        with self._ending:
            if self._ended:
                return
            self._ended = True
            try:
                close = getattr(self._content, "close", None)
                if close is not None:
                    close()
            finally:
                if self._on_end is not None:
                    self._on_end()


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
    return ClosingStream(
        chunks(lines),
        media_type=MEDIA_TYPES[format],
        headers={"Content-Disposition": f'attachment; filename="{filename}"'},
    )
