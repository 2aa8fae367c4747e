"""A session's messages: the chat-memory writes (put, set, reset, delete, archive) and
reads (the history, the context window, now or at a past version).

Every answer carries `ETag: "<version>"`: for a write, the version it made; for a read,
the version its messages are of (one read gives both). A write sent with
`If-Match: "<version>"` happens only if the session is still at that version (else 412,
nothing written). A write runs on the event loop when no other request is in flight
on a SQLite store, else in a worker thread (`deps.short_write`).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from contextlib import nullcontext
from typing import Annotated, Any, Literal

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import Field

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import WriteResult

from ..admission import new_session_counted
from ..auth import READ, WRITE
from ..deps import (
    BIG,
    PastInputs,
    ReadInputs,
    SessionCall,
    WindowInputs,
    WriteCall,
    WriteOptionsDep,
    WriteRequestOptions,
    on_session,
    short_read,
    short_write,
)
from ..http_errors import ERROR_RESPONSES
from ..large_bodies import LargeBodyRoute
from ..schemas import AppendIn, ArchiveIn, MessageList, MessagePage, MessagesIn, WriteAnswer
from ..session_responses import message_list, message_page, written

router = APIRouter(
    prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=LargeBodyRoute,
)  # fmt: skip


async def _write(
    request: Request, call: SessionCall, options: WriteRequestOptions,
    command: Callable[[Ledger, str, dict[str, Any]], WriteResult], creates: bool = False,
) -> Response:  # fmt: skip
    """`command(ledger, key, kwargs)` after the write's precondition, on the event loop
    when it is alone (`short_write`); `creates`: it may create the session, so it counts
    against the tenant's sessions quota."""
    key, who, ledger = call

    def write() -> WriteResult:
        options.check_exists(ledger, key, who.tenant)
        with new_session_counted(request, who.tenant, key) if creates else nullcontext():
            return command(ledger, key, options.ledger_kwargs(who))

    return written(await short_write(request, write))


class ContextInputs(WindowInputs, ReadInputs):
    """The window's inputs and what the read must see."""


class HistoryInputs(PastInputs, ReadInputs):
    """Which page of the history, and what the read must see."""

    status: Literal["active", "archived"] = "active"
    offset: int = Field(0, ge=0, le=BIG)
    limit: int | None = Field(
        None, ge=0, le=BIG,
        description="Most messages in the page. Default, and the most a page holds: the "
        "server's LEDGER_MAX_PAGE_MESSAGES; a page also ends before LEDGER_MAX_ANSWER_BYTES "
        "of messages. A page with fewer messages than asked is the last only if "
        "`next_cursor` is null. limit=0 asks for no messages: none, and no cursor.",
    )  # fmt: skip
    cursor: str | None = Field(
        None, max_length=64,
        description="`next_cursor` of the page before: the page after it, of the same "
        "version (not with offset, last, as_of_version or as_of).",
    )  # fmt: skip
    last: int | None = Field(
        None, ge=0, le=BIG,
        description="Start at the `last`-th newest message: the newest `last` messages, "
        "oldest first, in pages as any read (not with offset); read as many rows as that, "
        "however long the history.",
    )  # fmt: skip

    def position(self) -> tuple[int | None, int | None]:
        """(as_of_version, after): the version and the place the cursor names, or the
        `as_of_version` given and None."""
        if self.cursor is None:
            return self.as_of_version, None
        if (self.offset or self.last is not None or self.as_of_version is not None
                or self.as_of is not None):  # fmt: skip
            raise InvalidInput(
                "a cursor names its page: give no offset, last, as_of_version or as_of"
            )
        found = CURSOR.fullmatch(self.cursor)
        if found is None:
            raise InvalidInput("cursor is not one this history returned (its next_cursor)")
        return int(found[1]), int(found[2])


CURSOR = re.compile(r"([1-9][0-9]{0,17})-([0-9]{1,18})")  # responses.page_cursor


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


@router.post("/{key}/messages", response_model=WriteAnswer)
async def append_messages(
    request: Request, call: WriteCall, body: AppendIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Append messages to the session (put / put_messages), all or none; creates it."""
    return await _write(request, call, options, lambda ledger, key, kw:
                        ledger.put_messages(key, body.messages, **kw), creates=True)  # fmt: skip


@router.put("/{key}/messages", response_model=WriteAnswer)
async def replace_history(
    request: Request, call: WriteCall, body: MessagesIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Replace the session's whole history (set); the old one stays in the audit trail."""
    return await _write(request, call, options, lambda ledger, key, kw:
                        ledger.set(key, body.messages, **kw), creates=True)  # fmt: skip


@router.delete("/{key}/messages", response_model=WriteAnswer)
async def clear_history(request: Request, call: WriteCall, options: WriteOptionsDep) -> Response:
    """Clear the session's history (reset)."""
    return await _write(request, call, options, lambda ledger, key, kw: ledger.reset(key, **kw))


# A removal answers the message it removed (a retry under its Idempotency-Key, again,
# with no new event): to a key whose reads are logged, a read of it (`removed`).
RemovalCall = Annotated[SessionCall, Depends(on_session(WRITE, "removed"))]


@router.delete("/{key}/messages/last", response_model=WriteAnswer)
async def delete_last_message(
    request: Request, call: RemovalCall, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Remove the newest message; `removed` holds it."""
    return await _write(request, call, options, lambda ledger, key, kw:
                        ledger.delete_last_message(key, **kw))  # fmt: skip


@router.delete("/{key}/messages/{index}", response_model=WriteAnswer)
async def delete_message(
    request: Request, call: RemovalCall, index: Annotated[int, Path(ge=-BIG, le=BIG)],
    options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Remove the message at `index` (negative counts from the end); `removed` holds it."""
    return await _write(request, call, options, lambda ledger, key, kw:
                        ledger.delete_message(key, index, **kw))  # fmt: skip


@router.post("/{key}/archive", response_model=WriteAnswer)
async def archive_oldest(
    request: Request, call: WriteCall, body: ArchiveIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Move the `count` oldest active messages to the archive (read them with status=archived)."""
    return await _write(request, call, options, lambda ledger, key, kw:
                        ledger.archive_oldest(key, body.count, **kw))  # fmt: skip


@router.get("/{key}/messages", response_model=MessagePage)
def get_history(
    call: Annotated[SessionCall, Depends(on_session(READ, "transcript"))],
    inputs: Annotated[HistoryInputs, Depends(HistoryInputs.parse)],
) -> Response:  # fmt: skip
    """The session's history, oldest first, a page at a time (get_all: follow
    `next_cursor`); with `as_of_version` or `as_of`, the history as it stood then (replay)."""
    key, who, ledger = call
    options = inputs.read_options()
    as_of_version, after = inputs.position()
    read = ledger.page(key, tenant=who.tenant, status=inputs.status, offset=inputs.offset,
                       limit=inputs.limit, after=after, as_of_version=as_of_version,
                       as_of=inputs.as_of, min_version=options.min_version,
                       last=inputs.last)  # fmt: skip
    return message_page(read, who.tenant, key, options.held)
