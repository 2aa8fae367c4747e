"""A session's streams over HTTP: open one, append its deltas in batches, then complete it
(its text enters the history as one message) or abort it (the partial stays in the audit
trail). A stream with no request for `stream_timeout_seconds` is aborted by the server."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal
from urllib.parse import unquote_to_bytes

from fastapi import APIRouter, Depends, Path, Request, Response
from pydantic import BaseModel, ConfigDict, Field

from session_ledger.domain.errors import InvalidInput, StreamNotFound
from session_ledger.domain.streams import MAX_STREAM_ID_CHARS, check_stream_id

from ..admission import new_session_counted
from ..auth import READ
from ..deps import (
    TEXT_PATTERN,
    SessionCall,
    WriteCall,
    WriteOptionsDep,
    on_session,
)
from ..http_errors import ERROR_RESPONSES
from ..large_bodies import LargeBodyRoute
from ..schemas import WriteAnswer
from ..session_responses import written

router = APIRouter(
    prefix="/v1/sessions", tags=["streams"], responses=ERROR_RESPONSES,
    route_class=LargeBodyRoute,  # (a batch's deltas counted as decoded, as messages are)
)  # fmt: skip


def _stream_id(
    stream_id: Annotated[str, Path(
        min_length=1, description="The stream's id, as its opening answered, percent-encoded "
        "as one path segment (Python: urllib.parse.quote(stream_id, safe='')).",
        json_schema_extra={"pattern": TEXT_PATTERN, "maxLength": MAX_STREAM_ID_CHARS})],
) -> str:  # fmt: skip
    """The stream id of the path, decoded: the sessions' paths reach their routes as sent
    (middleware.py), so an id with a space or an `é` came here as `%20` or `%C3%A9`."""
    try:
        decoded = unquote_to_bytes(stream_id).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidInput("the stream id is not percent-encoded UTF-8") from None
    return check_stream_id(decoded)  # (what it may hold: as at its opening)


StreamIdDep = Annotated[str, Depends(_stream_id)]
Deltas = list[Annotated[str, Field(max_length=4 * 1024 * 1024)]]


class StreamOpenIn(BaseModel):
    """A stream to open: the role of the message it will make, and where it belongs."""

    model_config = ConfigDict(extra="forbid")

    role: str = Field("assistant", max_length=32, description="A LlamaIndex role.")
    stream_id: str | None = Field(None, min_length=1, max_length=MAX_STREAM_ID_CHARS,
                                  pattern=TEXT_PATTERN)  # fmt: skip
    turn: str | None = Field(None, max_length=256)
    parent: str | None = Field(None, max_length=256)


class ChunksIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deltas: Deltas = Field(min_length=1)


class CompleteIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    deltas: Deltas = Field(default_factory=list, description="The last deltas, if any.")
    additional_kwargs: dict[str, Any] | None = None


class AbortIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    cause: Literal["client_gone", "error", "timeout", "superseded"]
    deltas: Deltas = Field(default_factory=list)
    keep_partial: bool = Field(
        False, strict=True, description="Also keep the partial text as a message of the history."
    )


class StreamOpened(WriteAnswer):
    stream_id: str


class StreamState(BaseModel):
    stream_id: str
    role: str
    turn: str | None
    parent: str | None
    state: Literal["open", "completed", "aborted"]
    text: str = Field(description="The deltas recorded so far, joined.")
    opened_version: int
    ended_version: int | None
    cause: str | None
    updated_at: datetime


@router.post("/{key}/streams", response_model=StreamOpened, status_code=201)
def open_stream(
    request: Request, call: WriteCall, body: StreamOpenIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Open a stream (creates the session); deltas follow on its `chunks` route."""
    key, who, ledger = call
    options.check_exists(ledger, key, who.tenant)
    with new_session_counted(request, who.tenant, key):
        opened = ledger.open_stream(key, role=body.role, stream_id=body.stream_id,
                                    turn=body.turn, parent=body.parent,
                                    **options.ledger_kwargs(who))  # fmt: skip
    return written(opened.result, StreamOpened, 201, stream_id=opened.stream_id)


@router.post("/{key}/streams/{stream_id}/chunks", response_model=WriteAnswer)
def append_chunks(
    call: WriteCall, stream_id: StreamIdDep, body: ChunksIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Append a batch of deltas; 409 once the stream has completed or been aborted."""
    key, who, ledger = call
    result = ledger.append_stream(key, stream_id, body.deltas, **options.ledger_kwargs(who))
    return written(result)


@router.post("/{key}/streams/{stream_id}/complete", response_model=WriteAnswer)
def complete_stream(
    call: WriteCall, stream_id: StreamIdDep, body: CompleteIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Complete the stream: its text becomes one message of the history."""
    key, who, ledger = call
    result = ledger.complete_stream(key, stream_id, body.deltas, body.additional_kwargs,
                                    **options.ledger_kwargs(who))  # fmt: skip
    return written(result)


@router.post("/{key}/streams/{stream_id}/abort", response_model=WriteAnswer)
def abort_stream(
    call: WriteCall, stream_id: StreamIdDep, body: AbortIn, options: WriteOptionsDep,
) -> Response:  # fmt: skip
    """Abort the stream: the partial stays in the audit trail (and in the history only
    with `keep_partial`)."""
    key, who, ledger = call
    result = ledger.abort_stream(key, stream_id, body.cause, body.deltas, body.keep_partial,
                                 **options.ledger_kwargs(who))  # fmt: skip
    return written(result)


@router.get("/{key}/streams/{stream_id}", response_model=StreamState)
def get_stream(
    call: Annotated[SessionCall, Depends(on_session(READ, "stream"))], stream_id: StreamIdDep,
) -> StreamState:  # fmt: skip
    """The stream as recorded: its text so far and how it ended."""
    key, who, ledger = call
    found = ledger.stream_state(key, stream_id, tenant=who.tenant)
    if found is None:
        raise StreamNotFound(f"session {key!r} has no stream {stream_id!r}")
    return StreamState(**vars(found))
