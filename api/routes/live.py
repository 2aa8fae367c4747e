"""Live tails: a session's events as Server-Sent Events, each as it commits, in order.

`GET /v1/sessions/{key}/events/live` sends the session's events after `Last-Event-ID`
(or `?after=`, a version; none: from the start), then every later one as it commits,
chunks of open streams included. Each SSE message is one audit-trail event: `id:` its
version, `event:` its type, `data:` the `AuditEvent` JSON. A comment line goes out when
the tail was idle for `tail_heartbeat_seconds`. A tail holds at most `tail_batch` events
at once and reads the next batch only once the client took the last one, so a slow
client holds back its own tail, not the server's memory.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import StreamingResponse

from session_ledger.domain.errors import InvalidInput, StoreNotReady
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id

from ..deps import BIG, LedgerDep, ReaderDep, SessionKeyDep
from ..errors import ERROR_RESPONSES
from ..live_hub import LiveHub
from ..schemas import AuditEvent
from ..settings import Settings

router = APIRouter(prefix="/v1", tags=["sessions"], responses=ERROR_RESPONSES)
SSE = "text/event-stream"


@router.get(
    "/sessions/{key}/events/live",
    response_class=StreamingResponse,
    responses={200: {"content": {SSE: {}}, "description": "Server-Sent Events, unending."}},
)
async def tail_session(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep, request: Request,
    after: Annotated[int | None, Query(ge=0, le=BIG, description="Events after this "
                                       "version (Last-Event-ID wins when both are sent).")] = None,
    last_event_id: Annotated[str | None, Header(max_length=32)] = None,
) -> StreamingResponse:  # fmt: skip
    """The session's events as they commit (Server-Sent Events), resumable."""
    start = _resume_at(last_event_id, after)
    await asyncio.to_thread(ledger.head, key, tenant=who.tenant)  # 404 before the stream
    settings: Settings = request.app.state.settings
    hub: LiveHub | None = getattr(request.app.state, "live_hub", None)
    if hub is None:
        raise StoreNotReady("live tails need the server's lifespan (its hub), not started")
    events = _session_events(ledger, hub, settings, key, who.tenant, start)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type=SSE, headers=headers)


def _resume_at(last_event_id: str | None, after: int | None) -> int:
    if last_event_id is None:
        return after or 0
    if not last_event_id.strip().isdigit():
        raise InvalidInput(
            f"Last-Event-ID must be a version (an event's id:); got {last_event_id!r}"
        )
    return int(last_event_id)


async def _session_events(
    ledger: Ledger, hub: LiveHub, settings: Settings, key: str, tenant: str, after: int
) -> AsyncIterator[bytes]:
    sid = session_id(tenant, key)
    woken = hub.subscribe(sid)
    heartbeat = settings.tail_heartbeat_seconds
    try:
        yield b": live\n\n"  # the headers and a first line now: the client knows it is on
        sent_at = time.monotonic()
        while True:
            woken.clear()  # before the read: a commit after it sets it again
            entries = await asyncio.to_thread(
                ledger.audit, key, tenant=tenant, after_version=after, limit=settings.tail_batch
            )
            for entry in entries:
                data = AuditEvent(**vars(entry)).model_dump_json()
                yield f"id: {entry.version}\nevent: {entry.event_type}\ndata: {data}\n\n".encode()
                after = entry.version
            if entries:
                sent_at = time.monotonic()
                if len(entries) == settings.tail_batch:
                    continue
            idle = heartbeat - (time.monotonic() - sent_at)
            woke = idle > 0 and await _woken(woken, idle)
            if not woke and time.monotonic() - sent_at >= heartbeat:
                yield b": heartbeat\n\n"
                sent_at = time.monotonic()
    finally:
        hub.unsubscribe(sid, woken)


async def _woken(woken: asyncio.Event, timeout: float) -> bool:
    try:
        await asyncio.wait_for(woken.wait(), timeout)
    except TimeoutError:
        return False
    return True
