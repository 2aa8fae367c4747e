"""Live tails: a session's events, or a whole tenant's, as Server-Sent Events, each as it
commits, in order.

`GET /v1/sessions/{key}/events/live` sends the session's events after `Last-Event-ID`
(or `?after=`, a version; none: from the start), then every later one as it commits,
chunks of open streams included. Each SSE message is one audit-trail event: `id:` its
version, `event:` its type, `data:` the `AuditEvent` JSON. A comment line goes out when
the tail was idle for `tail_heartbeat_seconds`. A tail holds at most `tail_batch` events
at once and reads the next batch only once the client took the last one, so a slow
client holds back its own tail, not the server's memory.

`GET /v1/events/live?prefix=` (auditor and admin keys) sends every event of the caller's
tenant (of sessions whose key starts with `prefix`) in the store's feed order
(`projections/feed.py`), from `Last-Event-ID` (or `?after=`, a feed position; none: from
now). `id:` is the event's feed position; `data:` the `AuditEvent` JSON with its
session `key`. A read that passed other tenants' events only sends an `id:` line at the
next heartbeat, so a resumed tail does not look at them again.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Annotated

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import Field

from session_ledger.domain.errors import InvalidInput, StoreNotReady
from session_ledger.domain.feed import FeedPage
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.session import session_id

from ..access_log import AccessLoggedRoute, logged_query
from ..deps import BIG, TEXT_PATTERN, ExporterDep, LedgerDep, ReadCall
from ..errors import ERROR_RESPONSES
from ..inputs import RouteInputs
from ..live_hub import LiveHub
from ..schemas import AuditEvent, FeedEvent
from ..settings import Settings

router = APIRouter(prefix="/v1", tags=["sessions"], responses=ERROR_RESPONSES)
SSE = "text/event-stream"


class SessionTailInputs(RouteInputs):
    HEADERS = frozenset({"last_event_id"})
    after: int | None = Field(None, ge=0, le=BIG, description="Events after this version "
                              "(Last-Event-ID wins when both are sent).")  # fmt: skip
    last_event_id: str | None = Field(None, max_length=32)


class TenantTailInputs(RouteInputs):
    HEADERS = frozenset({"last_event_id"})
    prefix: str = Field("", max_length=1024, pattern=TEXT_PATTERN,
                        description="Only sessions whose key starts so.")  # fmt: skip
    after: str | None = Field(None, max_length=64, description="Events after this feed "
                              "position (an id:); Last-Event-ID wins.")  # fmt: skip
    last_event_id: str | None = Field(None, max_length=64)


@router.get(
    "/sessions/{key}/events/live",
    response_class=StreamingResponse,
    responses={200: {"content": {SSE: {}}, "description": "Server-Sent Events, unending."}},
)
async def tail_session(
    call: ReadCall, request: Request,
    inputs: Annotated[SessionTailInputs, Depends(SessionTailInputs.parse)],
) -> StreamingResponse:  # fmt: skip
    """The session's events as they commit (Server-Sent Events), resumable."""
    key, who, ledger = call
    start = _resume_at(inputs.last_event_id, inputs.after)
    await asyncio.to_thread(ledger.head, key, tenant=who.tenant)  # 404 before the stream
    settings: Settings = request.app.state.settings
    hub = _hub(request)
    events = _session_events(ledger, hub, settings, key, who.tenant, start)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type=SSE, headers=headers)


async def tail_tenant(
    ledger: LedgerDep, who: ExporterDep, request: Request,
    inputs: Annotated[TenantTailInputs, Depends(TenantTailInputs.parse)],
) -> StreamingResponse:  # fmt: skip
    """Every event of the caller's tenant as it commits (Server-Sent Events), resumable."""
    settings: Settings = request.app.state.settings
    hub = _hub(request)
    prefix, last_event_id = inputs.prefix, inputs.last_event_id
    start = last_event_id.strip() if last_event_id is not None else inputs.after
    if start is None:
        start = await asyncio.to_thread(ledger.feed_position)
    # The first read before the answer starts: a position not of this store is a 4xx.
    first = await asyncio.to_thread(
        ledger.tenant_events, tenant=who.tenant, prefix=prefix, after=start,
        limit=settings.tail_batch,
    )  # fmt: skip
    events = _tenant_events(ledger, hub, settings, who.tenant, prefix, start, first)
    headers = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
    return StreamingResponse(events, media_type=SSE, headers=headers)


# A read across the tenant's sessions: an auditor's or admin's tail is in the access log,
# its entry appended when the tail ends, with the number of events it sent.
router.add_api_route(
    "/events/live", tail_tenant, methods=["GET"], response_class=StreamingResponse,
    responses={200: {"content": {SSE: {}}, "description": "Server-Sent Events, unending."}},
    dependencies=[Depends(logged_query("live tail"))], route_class_override=AccessLoggedRoute,
)  # fmt: skip


def _hub(request: Request) -> LiveHub:
    hub: LiveHub | None = getattr(request.app.state, "live_hub", None)
    if hub is None:
        raise StoreNotReady("live tails need the server's lifespan (its hub), not started")
    return hub


async def _tenant_events(
    ledger: Ledger, hub: LiveHub, settings: Settings, tenant: str, prefix: str,
    sent: str, page: FeedPage,
) -> AsyncIterator[bytes]:  # fmt: skip
    woken = hub.subscribe_all()
    woken.set()  # a commit between the first read and the subscription: read again
    heartbeat, poll = settings.tail_heartbeat_seconds, settings.tail_poll_ms / 1000
    try:
        yield b": live\n\n"
        sent_at = time.monotonic()
        while True:
            for found in page.entries:
                data = FeedEvent(key=found.key, **vars(found.entry)).model_dump_json()
                yield (f"id: {found.position}\nevent: {found.entry.event_type}\n"
                       f"data: {data}\n\n").encode()  # fmt: skip
                sent = found.position
            if page.entries:
                sent_at = time.monotonic()
            position = page.position
            if not page.more:
                due = heartbeat - (time.monotonic() - sent_at)
                # Held back: the older transaction may end with no commit (no wake-up).
                wait = min(due, poll) if page.held_back else due
                if wait > 0:
                    await _woken(woken, wait)
                if time.monotonic() - sent_at >= heartbeat:
                    moved = f"id: {position}\n" if position != sent else ""
                    yield f"{moved}: heartbeat\n\n".encode()
                    sent, sent_at = position, time.monotonic()
            woken.clear()  # before the read: a commit after it sets it again
            page = await asyncio.to_thread(
                ledger.tenant_events, tenant=tenant, prefix=prefix, after=position,
                limit=settings.tail_batch,
            )  # fmt: skip
    finally:
        hub.unsubscribe_all(woken)


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
