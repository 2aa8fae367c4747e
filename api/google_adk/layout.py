"""How ADK sessions are laid out in the ledger: the keys of a session and of the app's
and user's shared state, and an ADK event as a ledger message (the event whole in
`additional_kwargs`, blocks that show it)."""

from __future__ import annotations

import hashlib
import re
from typing import Any
from urllib.parse import quote

from google.adk.events.event import Event

from session_ledger.domain.errors import InvalidInput

SESSIONS = "adk/"
APP_STATES = "adk-app/"
USER_STATES = "adk-user/"
EVENT = "adk_event"  # additional_kwargs: the ADK event whole
STATE = "adk_state"  # additional_kwargs: the session's own state after this message
STATE_AT = "adk_state_at"  # additional_kwargs: the position of the message holding it
SESSION = "adk_session"  # additional_kwargs of the first message: when it was made
SHARED_STATE = "adk_shared_state"  # additional_kwargs of an app or user state message
_PLAIN_ID = re.compile(r"[!-~]{1,200}")  # an id an Idempotency-Key header can carry as it is


# -- the messages ---------------------------------------------------------------------


def to_message(event: Event, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ledger message of an ADK event: the event whole in `additional_kwargs`, and
    blocks that show it (text, thoughts, tool calls, tool results)."""
    stored = event.model_dump(mode="json", exclude_none=True)
    blocks: list[dict[str, Any]] = []
    calls = responses = 0
    parts = event.content.parts if event.content and event.content.parts else []
    for part in parts:
        if part.function_call is not None:
            calls += 1
            call = part.function_call
            blocks.append({
                "block_type": "tool_call", "tool_call_id": call.id, "tool_name": call.name,
                "tool_kwargs": stored_part(call.args),
            })  # fmt: skip
        elif part.function_response is not None:
            responses += 1
            response = part.function_response
            text = _json_text({"name": response.name, "response": response.response})
            blocks.append({"block_type": "text", "text": text})
        elif part.text is not None:
            if part.thought:
                blocks.append({"block_type": "thinking", "content": part.text})
            else:
                blocks.append({"block_type": "text", "text": part.text})
    if event.author == "user" and not responses:
        role = "user"
    elif responses and not calls:
        role = "tool"
    else:
        role = "assistant"
    return message(role, blocks, {EVENT: stored, **(extra or {})})


def event_write_key(event_id: str, life: str | None = None) -> str:
    """The idempotency key of an event's write: its id (an id that is not visible ASCII
    of at most 200 characters, by its SHA-256). A session stores each event id once in
    each of its lives: `life` names one after the first that was given this id (`life_of`
    its first message), when an earlier life holds it."""
    if life is None:
        if _PLAIN_ID.fullmatch(event_id):
            return f"adk-event:{event_id}"
        digest = hashlib.sha256(event_id.encode("utf-8", "surrogatepass")).hexdigest()
        return f"adk-event-sha256:{digest}"
    named = f"{life}\x00{event_id}".encode("utf-8", "surrogatepass")
    return f"adk-event-life:{hashlib.sha256(named).hexdigest()}"


def life_of(kwargs: dict[str, Any]) -> str:
    """What names a life of a session (from its creation to its deletion): the `SESSION`
    entry (when it was made) of its first message's `additional_kwargs`, as JSON."""
    return _json_text(kwargs.get(SESSION))


def from_message(message: dict[str, Any]) -> Event:
    """The ADK event a ledger message holds (ValueError if it holds none)."""
    kwargs = message.get("additional_kwargs") or {}
    if EVENT not in kwargs:
        raise ValueError("the message holds no ADK event")
    return Event.model_validate(kwargs[EVENT])


def stored_part(value: Any) -> Any:
    from pydantic_core import to_jsonable_python

    return to_jsonable_python(value)


def _json_text(value: Any) -> str:
    import json

    return json.dumps(stored_part(value), ensure_ascii=False)


def message(role: str, blocks: list[dict[str, Any]], kwargs: dict[str, Any]) -> dict[str, Any]:
    return {"role": role, "blocks": blocks, "additional_kwargs": kwargs}


def time_of(kwargs: dict[str, Any]) -> float:
    """When a message's change was made: its event's timestamp, or the session's
    creation time for the first message."""
    if EVENT in kwargs:
        return float(kwargs[EVENT]["timestamp"])
    return float(kwargs[SESSION]["create_time"])


def state_at(kwargs: dict[str, Any], position: int) -> int:
    """Where the state stands, seen from the message at `position`."""
    return position if STATE in kwargs else int(kwargs[STATE_AT])


# -- keys -----------------------------------------------------------------------------


def name(value: object) -> str:
    if not isinstance(value, str):
        raise InvalidInput(f"ADK names must be strings; got {type(value).__name__}")
    return value


def session_id(value: object) -> str:
    return name(value).strip()


def part(name: str) -> str:
    return quote(name, safe="")


def session_key(app: str, user: str, sid: str) -> str:
    if not sid:
        raise InvalidInput("session_id must not be empty")
    return f"{SESSIONS}{part(app)}/{part(user)}/{part(sid)}"


def app_key(app: str) -> str:
    return f"{APP_STATES}{part(app)}"


def user_key(app: str, user: str) -> str:
    return f"{USER_STATES}{part(app)}/{part(user)}"
