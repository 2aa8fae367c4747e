"""Recording reads in the access log (projections/access_log.py), once for every route.

Every route that answers a session's content or evidence about it (a transcript, a
window, an audit trail, a replay, a diff, a stream, a chain check, a head, an export, a
checkpoint, the access log itself) names its read in its session dependency,
`Depends(on_session(READ, "transcript"))` (deps.py), or, across sessions,
`dependencies=[Depends(logged_query("search"))]`; either marks the request when the
caller's read is to be logged (any read by an auditor or admin key, any export, and an
agent's reads only when LEDGER_LOG_AGENT_READS is set: an agent reads its window on every
turn, which would make the log as large as the conversations). The routers'
`AccessLoggedRoute` then appends the entry when the answer is ready, with the route's own
inputs as it parsed them and the number of records the answer holds; for a streamed
export, when the stream ends (with `complete` false if the client left early).
`tests/e2e/test_access_log.py` walks the OpenAPI document and fails for a route that
answers content to an auditor or admin without an entry.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request, Response
from fastapi.concurrency import run_in_threadpool
from fastapi.responses import StreamingResponse
from fastapi.routing import APIRoute

from .auth import READ, Principal, require
from .deps import decode_session_key, mark_access
from .route_inputs import RouteInputs, route_inputs

# An event line of a JSONL export begins so, after the line before (the header's at least):
# a newline inside a line's JSON is escaped, where the text itself may stand in a value.
EVENT_LINE = b'\n{"record":"event"'
RECORDS_HEADER = "X-Ledger-Records"  # an answer that counts its records itself
reader = require(READ)
LISTS = ("messages", "events", "entries", "sessions", "keys")  # an answer's records, by name


def logged_query(action: str) -> Callable[..., Awaitable[None]]:
    """The dependency that marks a read across sessions (a search) for the access log."""

    async def mark(request: Request) -> None:  # no dependencies of its own: see auth.require
        mark_access(request, await reader(request), action, None)

    return mark


class AccessLoggedRoute(APIRoute):
    """Appends the access-log entry of a marked request once its answer is made."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()
        models = route_inputs(self)

        async def handle(request: Request) -> Response:
            response = await handler(request)
            access = getattr(request.state, "access", None)
            if access is None or not 200 <= response.status_code < 300:
                return response
            record = _recorder(request, *access, await _parameters(request, models))
            said = response.headers.get(RECORDS_HEADER)
            known = None if said is None else int(said)
            if isinstance(response, StreamingResponse):
                csv = (response.media_type or "").startswith("text/csv")
                response.body_iterator = _counted(response.body_iterator, record, csv, known)
                return response
            # (An answer that does not count itself is parsed, on the loop: a small one.)
            count = known if known is not None else records_in(json.loads(bytes(response.body)))
            await run_in_threadpool(record, count, True)
            return response

        return handle


def records_in(body: dict[str, Any]) -> int:
    """The records a JSON answer holds: the messages, events, entries, sessions or session
    keys it lists; of a replay, its window's messages; of a diff, the messages its changes
    remove and add. Any other answer (a head, a stream, a chain check) is one record."""
    for name in LISTS:
        if isinstance(body.get(name), list):
            return len(body[name])
    if "window" in body:
        return len(body["window"]["messages"])
    if "changes" in body:
        return sum(len(c["removed"]) + len(c["added"]) for c in body["changes"])
    return 1


async def _parameters(request: Request, models: list[type[RouteInputs]]) -> dict[str, Any]:
    """The route's own inputs, parsed again as the route parsed them (its models, the same
    call): those the caller gave, typed, never a query key the route does not declare;
    and its path's inputs beside the session key (a stream's id)."""
    found: dict[str, Any] = {}
    for model in models:
        parsed = await model.parse(request)
        found |= parsed.model_dump(mode="json", by_alias=True, exclude_unset=True)
    path = {name: _path_input(name, value) for name, value in request.path_params.items()
            if name != "key"}  # fmt: skip
    return found | path


def _path_input(name: str, value: str) -> Any:
    """A path's input as its route took it: a message's index a number (`+0`, `00` and
    `0` are index 0), any other (a stream's id) percent-decoded, as a session key is (a
    route that answered took it so)."""
    return int(value) if name == "index" else decode_session_key(value)


def _recorder(
    request: Request, who: Principal, action: str, key: str | None, parameters: dict[str, Any]
) -> Callable[[int, bool], None]:
    evidence = request.app.state.ledger.views.evidence

    def record(records: int, complete: bool) -> None:
        params = parameters if complete else {**parameters, "complete": False}
        evidence.record_access(who.tenant, who.actor, who.role, action, key, params, records)

    return record


async def _counted(
    chunks: AsyncIterator[Any], record: Callable[[int, bool], None], csv: bool,
    known: int | None = None,
) -> AsyncIterator[Any]:  # fmt: skip
    """The stream as it was, counting its records (its `EVENT_LINE`s wherever the chunks
    cut them, or CSV rows outside quoted fields) unless the route `known` them already (a
    body that is not lines, as RSMF's base64); the entry is appended when it ends, however
    it ends."""
    count, quoted, complete = 0, False, False
    carry = b""  # the end of what came before, too short to hold an EVENT_LINE
    try:
        async for chunk in chunks:
            data = chunk if isinstance(chunk, bytes) else str(chunk).encode()
            if csv:
                parts = data.split(b'"')
                count += sum(p.count(b"\n") for p in parts[int(quoted) :: 2])
                quoted ^= (len(parts) - 1) % 2 == 1
            else:
                seen = carry + data
                count += seen.count(EVENT_LINE)
                carry = seen[1 - len(EVENT_LINE) :]
            yield chunk
        complete = True
    finally:
        # (synchronously: a stream the client left is being cancelled, so no await)
        if known is not None:
            count = known
        elif csv:
            count = max(count - 1, 0)
        record(count, complete)
