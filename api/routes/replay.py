"""Replay: a session as it stood at one version or moment, with the context window `get`
gave then for a chosen token limit, and that window's token count."""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Depends, Response
from pydantic import TypeAdapter

from session_ledger.domain.ledger import Ledger

from ..access_logging import AccessLoggedRoute
from ..auth import READ
from ..deps import SessionCall, WindowInputs, on_session
from ..http_errors import ERROR_RESPONSES
from ..schemas import ContextWindow, Message, Replay, SessionSummary
from ..session_responses import counted, encoded

router = APIRouter(
    prefix="/v1/sessions", tags=["replay"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip
MESSAGES = TypeAdapter(list[Message])
CHUNK = 1000  # messages validated in one call (`_messages`)


def window_tokens(ledger: Ledger, contents: list[str | None], initial_token_count: int) -> int:
    """What ChatMemoryBuffer counts for a window: its texts joined by spaces."""
    if not contents:
        return initial_token_count
    return initial_token_count + ledger.tokenizer.tokens(" ".join(map(str, contents)))


@router.get("/{key}/replay", response_model=Replay)
def replay_session(
    call: Annotated[SessionCall, Depends(on_session(READ, "replay"))],
    inputs: Annotated[WindowInputs, Depends(WindowInputs.parse)],
) -> Response:  # fmt: skip
    """The session at a version or a moment (default: now): its head then, and the context
    window `get` gave then, with its token count. Page its history with
    `GET .../messages?as_of_version=` and the version answered here."""
    key, who, ledger = call
    version = ledger.head(key, tenant=who.tenant).version
    # Encoded here, in the worker thread (session_responses.encoded), not on the loop.
    answer = replayed(ledger, key, who.tenant, inputs)
    return counted(encoded(answer, version), len(answer.window.messages))


def replayed(ledger: Ledger, key: str, tenant: str, inputs: WindowInputs) -> Replay:
    """The replay of session `key` at the version or moment `inputs` name (the route's
    answer, and the MCP server's `replay` tool's)."""
    token_limit, initial_token_count = inputs.token_limit, inputs.initial_token_count
    head = ledger.head(key, tenant=tenant, as_of_version=inputs.as_of_version, as_of=inputs.as_of)
    limit = ledger.token_limit if token_limit is None else token_limit
    window = ledger.get(
        key, tenant=tenant, token_limit=limit, initial_token_count=initial_token_count,
        as_of_version=head.version,
    )  # fmt: skip
    return Replay(
        session=SessionSummary.of(head),
        window=ContextWindow(
            token_limit=limit, initial_token_count=initial_token_count,
            token_count=window_tokens(ledger, [m.content for m in window], initial_token_count),
            messages=_messages([m.to_dict() for m in window]),
        ),
    )  # fmt: skip


def _messages(dicts: list[dict[str, Any]]) -> list[Message]:
    """The window's messages validated as `Message`s a chunk at a time: validated in one
    call, 30,000 of them held the interpreter (the GIL) for 100-300 ms, the event loop
    and every other request waiting; the model takes them as they are."""
    return [
        m
        for i in range(0, len(dicts), CHUNK)
        for m in MESSAGES.validate_python(dicts[i : i + CHUNK])
    ]
