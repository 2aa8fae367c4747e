"""A session's messages: the chat-memory writes (put, set, reset, delete, archive) and
reads (the history, the context window, now or at a past version).

Every answer carries `ETag: "<version>"`: for a write, the version it made; for a read,
the version its messages are of (one read gives both). A write sent with
`If-Match: "<version>"` happens only if the session is still at that version (else 412,
nothing written).
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import Field

from session_ledger.domain.errors import SessionNotFound

from ..access_log import AccessLoggedRoute
from ..admission import new_session_counted
from ..auth import READ
from ..deps import (
    BIG,
    LedgerDep,
    PastInputs,
    ReadInputs,
    SessionCall,
    WindowInputs,
    WriteCall,
    WriteOptions,
    WriteOptionsDep,
    on_session,
    short_read,
)
from ..errors import ERROR_RESPONSES, PreconditionFailed
from ..responses import message_list, written
from ..schemas import AppendIn, ArchiveIn, MessageList, MessagesIn, WriteResult

router = APIRouter(
    prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


def _precondition(ledger: LedgerDep, key: str, tenant: str, options: WriteOptions) -> None:
    if options.must_exist:
        try:
            ledger.head(key, tenant=tenant, latest=True)
        except SessionNotFound:
            raise PreconditionFailed(f"If-Match: * but session {key!r} does not exist") from None


class ContextInputs(WindowInputs, ReadInputs):
    """The window's inputs and what the read must see."""


class HistoryInputs(PastInputs, ReadInputs):
    """Which messages of the history, and what the read must see."""

    status: Literal["active", "archived"] = "active"
    offset: int = Field(0, ge=0, le=BIG)
    limit: int | None = Field(None, ge=0, le=BIG)


# The context read first: routes match in order, and it is the hot one.
@router.get("/{key}/context", response_model=MessageList)
async def get_context(
    request: Request, call: Annotated[SessionCall, Depends(on_session(READ, "window"))],
    inputs: Annotated[ContextInputs, Depends(ContextInputs.parse)],
) -> Response:  # fmt: skip
    """The context window: the newest messages within `token_limit` (ChatMemoryBuffer.get);
    with `as_of_version` or `as_of`, the window the agent was given then."""
    key, who, ledger = call
    options = inputs.read_options()
    read = await short_read(request, lambda: ledger.window(
        key, tenant=who.tenant, token_limit=inputs.token_limit,
        initial_token_count=inputs.initial_token_count, as_of_version=inputs.as_of_version,
        as_of=inputs.as_of, min_version=options.min_version,
    ))  # fmt: skip
    return message_list(read, who.tenant, key, options.held)


@router.post("/{key}/messages", response_model=WriteResult)
def append_messages(
    request: Request, call: WriteCall, body: AppendIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Append messages to the session (put / put_messages), all or none; creates it."""
    key, who, ledger = call
    _precondition(ledger, key, who.tenant, options)
    with new_session_counted(request, who.tenant, key):
        result = ledger.put_messages(key, body.messages, **options.ledger_kwargs(who))
    return written(result)


@router.put("/{key}/messages", response_model=WriteResult)
def replace_history(
    request: Request, call: WriteCall, body: MessagesIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Replace the session's whole history (set); the old one stays in the audit trail."""
    key, who, ledger = call
    _precondition(ledger, key, who.tenant, options)
    with new_session_counted(request, who.tenant, key):
        result = ledger.set(key, body.messages, **options.ledger_kwargs(who))
    return written(result)


@router.delete("/{key}/messages", response_model=WriteResult)
def clear_history(
    call: WriteCall, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Clear the session's history (reset)."""
    key, who, ledger = call
    _precondition(ledger, key, who.tenant, options)
    return written(ledger.reset(key, **options.ledger_kwargs(who)))


@router.delete("/{key}/messages/last", response_model=WriteResult)
def delete_last_message(
    call: WriteCall, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Remove the newest message; `removed` holds it."""
    key, who, ledger = call
    _precondition(ledger, key, who.tenant, options)
    return written(ledger.delete_last_message(key, **options.ledger_kwargs(who)))


@router.delete("/{key}/messages/{index}", response_model=WriteResult)
def delete_message(
    call: WriteCall, index: Annotated[int, Path(ge=-BIG, le=BIG)], options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Remove the message at `index` (negative counts from the end); `removed` holds it."""
    key, who, ledger = call
    _precondition(ledger, key, who.tenant, options)
    kwargs = options.ledger_kwargs(who)
    return written(ledger.delete_message(key, index, **kwargs))


@router.post("/{key}/archive", response_model=WriteResult)
def archive_oldest(
    call: WriteCall, body: ArchiveIn,
    options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Move the `count` oldest active messages to the archive (read them with status=archived)."""
    key, who, ledger = call
    _precondition(ledger, key, who.tenant, options)
    kwargs = options.ledger_kwargs(who)
    return written(ledger.archive_oldest(key, body.count, **kwargs))


@router.get("/{key}/messages", response_model=MessageList)
def get_history(
    call: Annotated[SessionCall, Depends(on_session(READ, "transcript"))],
    inputs: Annotated[HistoryInputs, Depends(HistoryInputs.parse)],
) -> Response:  # fmt: skip
    """The session's whole history, oldest first, or a page of it (get_all); with
    `as_of_version` or `as_of`, the history as it stood then (replay)."""
    key, who, ledger = call
    options = inputs.read_options()
    read = ledger.history(key, tenant=who.tenant, status=inputs.status, offset=inputs.offset,
                          limit=inputs.limit, as_of_version=inputs.as_of_version,
                          as_of=inputs.as_of, min_version=options.min_version)  # fmt: skip
    return message_list(read, who.tenant, key, options.held)
