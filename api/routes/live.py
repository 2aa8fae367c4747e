"""Live tails: a session's events, or a whole tenant's, as Server-Sent Events, each as it
commits, in order.

`GET /v1/sessions/{key}/events/live` sends the session's events after `Last-Event-ID`
(or `?after=`, a version; none: from the start), then every later one as it commits,
chunks of open streams included. Each SSE message is one audit-trail event: `id:` its
version, `event:` its type, `data:` the `AuditEvent` JSON. A comment line goes out when
the tail was idle for `tail_heartbeat_seconds`. A tail holds at most `tail_batch` events
at once, ending before `max_answer_bytes` of them (its first whatever its size, as a page
of the audit trail: `_session_batch`), and reads the next batch only once the client took
the last one, so a slow client holds back its own tail, not the server's memory. A batch
is read and encoded in a worker thread: the event loop only sends its bytes.

`GET /v1/events/live?prefix=` (auditor and admin keys) sends every event of the caller's
tenant (of sessions whose key starts with `prefix`) in the store's feed order
(`projections/feed.py`), from `Last-Event-ID` (or `?after=`, an `id:` it sent; none: from
now). `id:` is an opaque cursor of the event's feed position (`feed_cursors.py`): it
tells nothing of other tenants' writes. `data:` the `AuditEvent` JSON with its session
`key`. Every heartbeat carries the cursor of where the tail has read to, so a resumed
tail does not look again at the other tenants' events it passed. Its batches end before
`max_answer_bytes` of events too (`_tenant_batch`: the feed knows no sizes before the
read, so a batch is cut where its JSON passes them, and the next reads look at fewer).

Either tail counts against its key's and tenant's tails (`live_tails.py`: 429 beyond
them), ends after `tail_max_seconds` (the client reconnects with Last-Event-ID) or when
its key is revoked, each time with a last comment line saying why. An auditor's or
admin's tail is in the access log once, as it opens, with the parameters its caller gave
and 0 records: what it will send is not known then, and an entry made only as it ended
would be lost with the process. The tenant tail's entry names no session, as a search's.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request
from fastapi.responses import StreamingResponse
from pydantic import Field
from starlette.types import Receive, Scope, Send

from session_ledger.domain.errors import InvalidInput, StoreNotReady
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import AuditEntry
from session_ledger.domain.session import session_id

from ..auth import Principal
from ..deps import BIG, TEXT_PATTERN, ExporterDep, LedgerDep, ReadCall, mark_access
from ..feed_cursors import MAX_CURSOR_CHARS, FeedCursors, ServerFeedCursors
from ..http_errors import ERROR_RESPONSES, LastEventIdInvalid
from ..live_hub import LiveHub
from ..live_tails import END_GRACE_SECONDS, LiveTails, OpenTail
from ..route_inputs import RouteInputs
from ..schemas import AuditEvent, FeedEvent
from ..settings import Settings
from .events import audit_batch

router = APIRouter(prefix="/v1", tags=["sessions"], responses=ERROR_RESPONSES)
SSE = "text/event-stream"
ACTION = "live tail"  # its access-log entries
HEADERS = {"Cache-Control": "no-store", "X-Accel-Buffering": "no"}
MAX_HEADER_CHARS = 1024  # longer: refused by the model (422) before any check of ours


class SessionTailInputs(RouteInputs):
    HEADERS = frozenset({"last_event_id"})
    after: int | None = Field(None, ge=0, le=BIG, description="Events after this version "
                              "(Last-Event-ID wins when both are sent).")  # fmt: skip
    last_event_id: str | None = Field(None, max_length=MAX_HEADER_CHARS)


class TenantTailInputs(RouteInputs):
    HEADERS = frozenset({"last_event_id"})
    prefix: str = Field("", max_length=1024, pattern=TEXT_PATTERN,
                        description="Only sessions whose key starts so.")  # fmt: skip
    after: str | None = Field(
        None, max_length=MAX_CURSOR_CHARS,
        description="Events after this cursor (an id: the tail sent); Last-Event-ID wins.",
    )  # fmt: skip
    last_event_id: str | None = Field(None, max_length=MAX_HEADER_CHARS)


class TailResponse(StreamingResponse):
    """A tail's answer: its count in `LiveTails` ends with the answer, however it ends
    (also when the client left before its first line). Once the tail must end, the
    answer has `END_GRACE_SECONDS` to say why and finish; one still waiting then for a
    client that takes nothing is cut (uvicorn closes the connection)."""

    def __init__(self, tails: LiveTails, tail: OpenTail, events: AsyncIterator[bytes]) -> None:
        super().__init__(events, media_type=SSE, headers=HEADERS)
        self.tails, self.tail = tails, tail

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        answer = asyncio.ensure_future(super().__call__(scope, receive, send))
        gone = asyncio.ensure_future(self.tail.gone.wait())
        try:
            await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
            if not answer.done():
                await asyncio.wait({answer}, timeout=END_GRACE_SECONDS)
            if not answer.done():
                answer.cancel()
                await asyncio.wait({answer})
            else:
                answer.result()  # its error, if any, as the server would have had it
        finally:
            answer.cancel()
            gone.cancel()
            self.tails.closed(self.tail)


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
    hub, tails = _hub(request), _tails(request)
    tail = tails.opened(who)  # 429 before any read
    try:
        await asyncio.to_thread(ledger.head, key, tenant=who.tenant)  # 404 before the stream
        resumed = {} if inputs.last_event_id is None and inputs.after is None else {"after": start}
        await _log_opened(request, who, key, resumed)
    except BaseException:
        tails.closed(tail)
        raise
    settings: Settings = request.app.state.settings
    return TailResponse(tails, tail, _session_events(ledger, hub, settings, tail, key, start))


@router.get(
    "/events/live",
    response_class=StreamingResponse,
    responses={200: {"content": {SSE: {}}, "description": "Server-Sent Events, unending."}},
)
async def tail_tenant(
    ledger: LedgerDep, who: ExporterDep, request: Request,
    inputs: Annotated[TenantTailInputs, Depends(TenantTailInputs.parse)],
) -> StreamingResponse:  # fmt: skip
    """Every event of the caller's tenant as it commits (Server-Sent Events), resumable."""
    hub, tails = _hub(request), _tails(request)
    settings: Settings = request.app.state.settings
    server_cursors: ServerFeedCursors = request.app.state.feed_cursors
    cursors = await server_cursors.get()
    header = inputs.last_event_id is not None
    given = inputs.last_event_id.strip() if inputs.last_event_id is not None else inputs.after
    try:
        start = None if given is None else cursors.open(who.tenant, given)
    except InvalidInput as e:
        raise (LastEventIdInvalid(f"Last-Event-ID: {e}") if header else e) from None
    tail = tails.opened(who)  # 429 before any read
    try:
        if start is None:
            start = await asyncio.to_thread(ledger.feed_position)
        try:  # the first read before the answer starts: a position past the store's is a 4xx
            first = await asyncio.to_thread(
                _tenant_batch, ledger, cursors, who.tenant, inputs.prefix, start,
                settings.tail_batch, settings.tail_batch,
            )  # fmt: skip
        except InvalidInput as e:
            raise (LastEventIdInvalid(f"Last-Event-ID: {e}") if header else e) from None
        resumed = {} if given is None else {"after": given}
        prefix = {"prefix": inputs.prefix} if "prefix" in inputs.model_fields_set else {}
        await _log_opened(request, who, None, prefix | resumed)
    except BaseException:
        tails.closed(tail)
        raise
    events = _tenant_events(ledger, hub, settings, cursors, tail, inputs.prefix, first)
    return TailResponse(tails, tail, events)


def _hub(request: Request) -> LiveHub:
    hub: LiveHub | None = getattr(request.app.state, "live_hub", None)
    if hub is None:
        raise StoreNotReady("live tails need the server's lifespan (its hub), not started")
    return hub


def _tails(request: Request) -> LiveTails:
    tails: LiveTails | None = getattr(request.app.state, "live_tails", None)
    if tails is None:
        raise StoreNotReady("live tails need the server's lifespan, not started")
    return tails


async def _log_opened(
    request: Request, who: Principal, key: str | None, parameters: dict[str, Any]
) -> None:
    """The tail's access-log entry, when its read is to be logged (`mark_access`): once,
    as it opens, with its own parameters as validated (a tail may never end)."""
    mark_access(request, who, ACTION, key)
    if getattr(request.state, "access", None) is None:
        return
    evidence = request.app.state.ledger.views.evidence
    await asyncio.to_thread(
        evidence.record_access, who.tenant, who.actor, who.role, ACTION, key, parameters, 0
    )


def _ending(tail: OpenTail) -> bytes | None:
    """The tail's last line, if it must end now (revoked, stopping, or its lifetime over)."""
    why = tail.ended or ("its time is over" if tail.left() <= 0 else None)
    if why is None:
        return None
    return f": tail ended: {why}; reconnect with Last-Event-ID\n\n".encode()


@dataclass(frozen=True)
class TenantBatch:
    """One read of the tenant feed, ready to send: its SSE messages, where to read on from,
    and how many events of the feed the next read looks at."""

    frames: list[bytes]  # each event's SSE message, as sent (let go of as it is sent)
    position: str  # past every event the read looked at, or the last one sent if cut
    more: bool  # read on at once
    held_back: bool  # committed events wait for an older transaction: read again soon
    limit: int  # the next read's `limit`


def _tenant_batch(
    ledger: Ledger, cursors: FeedCursors, tenant: str, prefix: str, after: str, limit: int,
    cap: int,
) -> TenantBatch:  # fmt: skip
    """The tenant's events after feed position `after` (at most `limit` looked at), as SSE
    messages made here, in the worker thread (not on the event loop), ending before
    `max_answer_bytes` of them (the first whatever its size). The feed does not know an
    event's size before it reads it: a read whose JSON passes them is cut after the last
    that fits (its position the one to read on from: the rest is read again, never
    skipped), and the next read looks at one event (the one that did not fit); a read that
    held less than half the bytes lets the next look at twice as many, up to `cap`."""
    bound = ledger.limits.max_answer_bytes
    page = ledger.tenant_events(tenant=tenant, prefix=prefix, after=after, limit=limit)
    frames: list[bytes] = []
    held = 0
    for found in page.entries:
        data = FeedEvent(key=found.key, **vars(found.entry)).model_dump_json()
        cursor = cursors.seal(tenant, found.position)
        frame = f"id: {cursor}\nevent: {found.entry.event_type}\ndata: {data}\n\n".encode()
        if frames and held + len(frame) > bound:
            position = page.entries[len(frames) - 1].position
            return TenantBatch(frames, position, True, page.held_back, 1)
        frames.append(frame)
        held += len(frame)
    following = min(cap, limit * 2) if held <= bound // 2 else limit
    return TenantBatch(frames, page.position, page.more, page.held_back, following)


async def _tenant_events(
    ledger: Ledger, hub: LiveHub, settings: Settings, cursors: FeedCursors, tail: OpenTail,
    prefix: str, batch: TenantBatch,
) -> AsyncIterator[bytes]:  # fmt: skip
    tenant, woken = tail.who.tenant, tail.woken
    hub.subscribe_tenant(tenant, woken)
    woken.set()  # a commit between the first read and the subscription: read again
    heartbeat, poll = settings.tail_heartbeat_seconds, settings.tail_poll_ms / 1000
    try:
        yield b": live\n\n"
        sent_at = time.monotonic()
        while True:
            if batch.frames:
                while batch.frames:  # each let go once sent: an idle tail holds no events
                    yield batch.frames.pop(0)
                sent_at = time.monotonic()
            position = batch.position
            if not batch.more and _ending(tail) is None:
                due = min(heartbeat - (time.monotonic() - sent_at), tail.left())
                # Held back: the older transaction may end with no commit (no wake-up).
                wait = min(due, poll) if batch.held_back else due
                if wait > 0:
                    await _woken(woken, wait)
            ending = _ending(tail)
            if ending is not None or time.monotonic() - sent_at >= heartbeat:
                # (where it read to, with every heartbeat alike: nothing to compare)
                yield f"id: {cursors.seal(tenant, position)}\n: heartbeat\n\n".encode()
                sent_at = time.monotonic()
            if ending is not None:
                yield ending
                return
            woken.clear()  # before the read: a commit after it sets it again
            batch = await asyncio.to_thread(
                _tenant_batch, ledger, cursors, tenant, prefix, position, batch.limit,
                settings.tail_batch,
            )  # fmt: skip
    finally:
        hub.unsubscribe_tenant(tenant, woken)


def _resume_at(last_event_id: str | None, after: int | None) -> int:
    if last_event_id is None:
        return after or 0
    given = last_event_id.strip()
    if not given.isascii() or not given.isdigit() or len(given) > len(str(BIG)) or int(given) > BIG:
        raise LastEventIdInvalid(
            f"Last-Event-ID must be a version of the session (an event's id:, 0 to {BIG}); "
            f"got {last_event_id[:40]!r}"
        )
    return int(given)


def _session_batch(
    ledger: Ledger, key: str, tenant: str, after: int, limit: int
) -> tuple[list[bytes], int, bool]:
    """Session `key`'s events after version `after`, as SSE messages made here, in the
    worker thread (not on the event loop), bounded as a page of the audit trail is
    (`events.audit_batch`); the version of the last (`after` if none), and whether to
    read on at once (it ended before an event that followed)."""

    def frame(entry: AuditEntry) -> bytes:
        data = AuditEvent(**vars(entry)).model_dump_json()
        return f"id: {entry.version}\nevent: {entry.event_type}\ndata: {data}\n\n".encode()

    entries, frames, more = audit_batch(ledger, key, tenant, after, limit, frame)
    return frames, entries[-1].version if entries else after, more


async def _session_events(
    ledger: Ledger, hub: LiveHub, settings: Settings, tail: OpenTail, key: str, after: int
) -> AsyncIterator[bytes]:
    tenant, woken = tail.who.tenant, tail.woken
    sid = session_id(tenant, key)
    hub.subscribe(sid, woken)
    heartbeat = settings.tail_heartbeat_seconds
    try:
        yield b": live\n\n"  # the headers and a first line now: the client knows it is on
        sent_at = time.monotonic()
        while True:
            woken.clear()  # before the read: a commit after it sets it again
            ending = _ending(tail)
            if ending is not None:
                yield ending
                return
            frames, after, more = await asyncio.to_thread(
                _session_batch, ledger, key, tenant, after, settings.tail_batch
            )
            if frames:
                while frames:  # each let go once sent: an idle tail holds no events
                    yield frames.pop(0)
                sent_at = time.monotonic()
                if more:
                    continue
            idle = min(heartbeat - (time.monotonic() - sent_at), tail.left())
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
