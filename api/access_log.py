"""Recording reads in the access log (projections/access_log.py), once for every route.

A route that reads a transcript, a window, an audit trail or an export declares
`dependencies=[Depends(logged("transcript"))]`; the dependency marks the request when the
caller's read is to be logged (any read by an auditor or admin key, any export, and an
agent's reads only when LEDGER_LOG_AGENT_READS is set: an agent reads its window on every
turn, which would make the log as large as the conversations). The routers'
`AccessLoggedRoute` then appends the entry when the answer is ready, with the number of
records it holds; for a streamed export, when the stream ends (with `complete` false if
the client left early).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute

from session_ledger.projections.access_log import record_access
from session_ledger.projections.views import SQLViews

from .auth import Principal
from .deps import ReaderDep, SessionKeyDep

ALWAYS_LOGGED_ROLES = frozenset({"auditor", "admin"})
EVENT_LINE = b'{"record":"event"'  # an event line of a JSONL export (quotes are escaped inside)
RECORDS_HEADER = "X-Ledger-Records"  # a streamed answer that counts its records itself


def logged(action: str) -> Callable[..., Awaitable[None]]:
    """The dependency that marks a read of one session (`action`) for the access log."""

    async def mark(request: Request, who: ReaderDep, key: SessionKeyDep) -> None:
        _mark(request, who, action, key)

    return mark


def logged_query(action: str) -> Callable[..., Awaitable[None]]:
    """The dependency that marks a read across sessions (a search) for the access log."""

    async def mark(request: Request, who: ReaderDep) -> None:
        _mark(request, who, action, None)

    return mark


def _mark(request: Request, who: Principal, action: str, key: str | None) -> None:
    if (who.role in ALWAYS_LOGGED_ROLES or action == "export"
            or request.app.state.settings.log_agent_reads):  # fmt: skip
        request.state.access = (who, action, key)


class AccessLoggedRoute(APIRoute):
    """Appends the access-log entry of a marked request once its answer is made."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            response = await handler(request)
            access = getattr(request.state, "access", None)
            if access is None or not 200 <= response.status_code < 300:
                return response
            record = _recorder(request, *access)
            if isinstance(response, StreamingResponse):
                csv = response.media_type is not None and response.media_type.startswith("text/csv")
                said = response.headers.get(RECORDS_HEADER)
                known = None if said is None else int(said)
                response.body_iterator = _counted(response.body_iterator, record, csv, known)
                return response
            body = json.loads(bytes(response.body))
            count = len(body.get("messages", body.get("events", [])))
            await run_in_threadpool(record, count, True)
            return response

        return handle


def _recorder(
    request: Request, who: Principal, action: str, key: str | None
) -> Callable[[int, bool], None]:
    views = request.app.state.ledger.views
    assert isinstance(views, SQLViews)
    parameters: dict[str, Any] = dict(request.query_params)

    def record(records: int, complete: bool) -> None:
        params = parameters if complete else {**parameters, "complete": False}
        record_access(views, who.tenant, who.actor, who.role, action, key, params, records)

    return record


async def _counted(
    chunks: AsyncIterator[Any], record: Callable[[int, bool], None], csv: bool,
    known: int | None = None,
) -> AsyncIterator[Any]:  # fmt: skip
    """The stream as it was, counting its records (event lines, or CSV rows outside quoted
    fields) unless the route `known` them already (a body that is not lines, as RSMF's
    base64); the entry is appended when it ends, however it ends."""
    count, quoted, complete = 0, False, False
    try:
        async for chunk in chunks:
            data = chunk if isinstance(chunk, bytes) else str(chunk).encode()
            if csv:
                parts = data.split(b'"')
                count += sum(p.count(b"\n") for p in parts[int(quoted) :: 2])
                quoted ^= (len(parts) - 1) % 2 == 1
            else:
                count += data.count(EVENT_LINE)
            yield chunk
        complete = True
    finally:
        # (synchronously: a stream the client left is being cancelled, so no await)
        if known is not None:
            count = known
        elif csv:
            count = max(count - 1, 0)
        record(count, complete)
