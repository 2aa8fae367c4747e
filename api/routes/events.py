"""A session's audit trail: its events, oldest first, with actor, reason and changes.

A page of it ends before `max_answer_bytes` of events (its first whatever its size), as
a page of the history does: an event's changes hold the messages it added or removed
whole, so a few large writes would otherwise make an answer of hundreds of megabytes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated

from fastapi import APIRouter, Depends, Response
from pydantic import Field, TypeAdapter

from session_ledger.domain.inputs import check_key, check_tenant
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import AuditEntry
from session_ledger.domain.session import session_id

from ..access_logging import AccessLoggedRoute
from ..auth import READ
from ..deps import BIG, SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import AuditEvent, AuditTrailAnswer
from ..session_responses import JSON, counted, etag

router = APIRouter(
    prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
EVENT = TypeAdapter(AuditEvent)


class AuditInputs(RouteInputs):
    after: int = Field(0, ge=0, le=BIG, description="Events after this version.")
    limit: int = Field(
        100, ge=1, le=1000,
        description="Most events in the page; a page also ends before "
        "LEDGER_MAX_ANSWER_BYTES of events (its first whatever its size). A page with "
        "fewer events than asked is the last only if `next_after` is null.",
    )  # fmt: skip


@router.get("/{key}/events", response_model=AuditTrailAnswer)
def get_audit_trail(
    call: Annotated[SessionCall, Depends(on_session(READ, "audit"))],
    inputs: Annotated[AuditInputs, Depends(AuditInputs.parse)],
) -> Response:  # fmt: skip
    """The session's audit trail: its events, oldest first, with actor, reason and changes,
    a page at a time (pass `next_after` as `after` for the next)."""
    key, who, ledger = call
    events, following = audit_page(ledger, key, who.tenant, inputs.after, inputs.limit)
    # The version after the events are read: no event of the page is newer than the ETag.
    response = Response(audit_answer(events, following), media_type=JSON)
    etag(response, ledger.head(key, tenant=who.tenant).version)
    return counted(response, len(events))


def audit_page(
    ledger: Ledger, key: str, tenant: str, after: int, limit: int
) -> tuple[list[bytes], int | None]:
    """A page of session `key`'s audit trail, after version `after` (the route's answer,
    and the MCP server's `audit_trail` tool's): each event as its JSON (`audit_batch`),
    and the version to read on after (`next_after`; None: no event followed the page)."""
    entries, events, more = audit_batch(
        ledger, key, tenant, after, limit,
        lambda entry: EVENT.dump_json(AuditEvent(**vars(entry)), by_alias=True),
    )  # fmt: skip
    return events, entries[-1].version if more and entries else None


def audit_batch(
    ledger: Ledger, key: str, tenant: str, after: int, limit: int,
    encode: Callable[[AuditEntry], bytes],
) -> tuple[list[AuditEntry], list[bytes], bool]:  # fmt: skip
    """Session `key`'s audit entries after version `after`, each with what `encode` makes
    of it: at most `limit` of them, ending before `max_answer_bytes` of what they make
    (the first whatever its size); and whether an entry follows them (the batch ended
    before it). A page of the audit trail (`audit_page`), a live tail's batch (live.py).

    The events' stored sizes say how many are read (a few writes of tens of megabytes
    each are read one at a time); what they make, which also holds what a replace
    removed (from the views), where the batch ends."""
    most = ledger.limits.max_answer_bytes
    sizes = ledger.views.evidence.event_sizes(
        session_id(check_tenant(tenant), check_key(key)), after, BIG, limit
    )
    count, held = 0, 0
    for size in sizes:
        if count and held + size > most:
            break
        count, held = count + 1, held + size
    # (no sizes: no event after `after`, or the session is not found, as the read says)
    entries = ledger.audit(key, tenant=tenant, after_version=after, limit=count or limit)
    made: list[bytes] = []
    held = 0
    for entry in entries:
        text = encode(entry)
        if made and held + len(text) > most:
            break
        made.append(text)
        held += len(text)
    more = len(made) < len(entries) or count < len(sizes) or len(made) == limit
    return entries[: len(made)], made, more


def audit_answer(events: list[bytes], following: int | None) -> bytes:
    """An `AuditTrailAnswer` of a page's events (their JSON): the bytes FastAPI would send
    for the model, made in the route's worker thread, not on the event loop."""
    end = b"null" if following is None else str(following).encode()
    return b"".join((b'{"events":[', b",".join(events), b'],"next_after":', end, b"}"))
