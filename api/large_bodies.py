"""Large JSON bodies decoded off the event loop.

FastAPI decodes a route's JSON body (`await request.json()`) on the event loop before
the route runs: 28 MiB of messages took 50-350 ms there, during which no other request
was served. A route of `LargeBodyRoute` hands FastAPI a request whose body, when larger
than `loop_write_max_bytes`, is decoded in a worker thread, in parts (`decode_in_parts`:
json's decoder holds the GIL for a whole call); a smaller one, as before, on the loop,
where a thread hand-off would cost more than the decoding.

Either way a write's `messages` are counted before they are validated: more than
`max_messages_per_write` answer 413 at once (a large body's decoding stops at the first
one over), not after millions of items were decoded, copied and validated one by one.
And the body's top object has at most `MAX_MEMBERS` members (a route's body has a few):
FastAPI validates the body on the loop, an error for each member it does not know, and a
million of them held every request for seconds.
The request was authenticated before its body was read (middleware.AuthenticatedBodies).
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response

from session_ledger.domain.errors import InvalidInput, PayloadTooLarge
from session_ledger.projections import strict_json

from .access_logging import AccessLoggedRoute
from .http_errors import ReadingBodyFailed

# Strict: an object that names a key twice is refused (strict_json), in every part.
_DECODER = json.JSONDecoder(object_pairs_hook=strict_json.unique_object)
_SPACE = re.compile(r"[ \t\n\r]*")
# A write's list of items, a member of its body's top object: a put's or set's messages,
# a stream batch's deltas (each at most `max_messages_per_write`, as the domain checks).
COUNTED = ("messages", "deltas")
MAX_MEMBERS = 64  # of a body's top object: a route's body model has a handful of fields


class TooManyMembers(Exception):
    """The body's top object has more than MAX_MEMBERS members."""

    def answer(self) -> ReadingBodyFailed:
        """The 422 to raise from `json()`."""
        message = f"the body's object has more than {MAX_MEMBERS} members; no request has"
        return ReadingBodyFailed(InvalidInput(message))


class TooManyMessages(Exception):
    """More than `limit` items in the `name` array (one of COUNTED) of the body's top
    object."""

    def __init__(self, name: str, limit: int, count: int | None = None) -> None:
        super().__init__(name, limit, count)
        self.name, self.limit, self.count = name, limit, count

    def answer(self) -> ReadingBodyFailed:
        """The 413 the domain answers (`payload_too_large`), to raise from `json()`."""
        many = f"more than {self.limit}" if self.count is None else str(self.count)
        message = f"{many} {self.name} in one write; the limit is {self.limit}"
        return ReadingBodyFailed(PayloadTooLarge(message))


def decode_in_parts(body: bytes, max_messages: int | None = None) -> Any:
    """`json.loads(body)`, each member of the top object, and each item of an array there
    (a write's messages), decoded by a call of its own: json's decoder holds the GIL for
    the whole of one call (28 MiB of messages: 50-90 ms in one piece, while no other
    thread of the server ran), and between calls other threads take their turns. Any
    other shape, or invalid JSON, is left to `json.loads` (its value, or its error).
    TooManyMessages as soon as its `messages` (or `deltas`) have one item over
    `max_messages`."""
    try:
        return _object_in_parts(body.decode("utf-8"), max_messages)
    except strict_json.RepeatedKey:
        raise
    except (ValueError, IndexError):  # (UnicodeDecodeError too: json.loads detects others)
        value = strict_json.loads(body)
        count_messages(value, max_messages)
        return value


def count_messages(value: Any, max_messages: int | None) -> None:
    """TooManyMembers if `value`, a decoded body, is an object of more than MAX_MEMBERS
    members; TooManyMessages if it has more `messages` (or `deltas`) than
    `max_messages`."""
    if isinstance(value, dict) and len(value) > MAX_MEMBERS:
        raise TooManyMembers()
    if max_messages is not None and isinstance(value, dict):
        for name in COUNTED:
            items = value.get(name)
            if isinstance(items, list) and len(items) > max_messages:
                raise TooManyMessages(name, max_messages, len(items))


def _object_in_parts(text: str, max_messages: int | None = None) -> dict[str, Any]:
    decode, space = _DECODER.raw_decode, _SPACE.match
    at = space(text).end()
    if text[at] != "{":
        raise ValueError("not an object")
    out: dict[str, Any] = {}
    at = space(text, at + 1).end()
    while text[at] != "}":
        if out:  # a comma before every member but the first
            if text[at] != ",":
                raise ValueError("no comma")
            at = space(text, at + 1).end()
        if text[at] != '"':
            raise ValueError("not a key")
        if len(out) == MAX_MEMBERS:  # one more: decoded no further
            raise TooManyMembers()
        key, at = decode(text, at)
        if key in out:
            raise strict_json.RepeatedKey(key)
        at = space(text, at).end()
        if text[at] != ":":
            raise ValueError("no colon")
        at = space(text, at + 1).end()
        if text[at] == "[":
            items: list[Any] = []
            most = max_messages if key in COUNTED else None
            at = space(text, at + 1).end()
            while text[at] != "]":
                if items:
                    if text[at] != ",":
                        raise ValueError("no comma")
                    at = space(text, at + 1).end()
                    if len(items) == most:  # one more: decoded no further
                        raise TooManyMessages(key, most)
                item, at = decode(text, at)
                items.append(item)
                at = space(text, at).end()
            out[key], at = items, at + 1
        else:
            out[key], at = decode(text, at)
        at = space(text, at).end()
    if space(text, at + 1).end() != len(text):
        raise ValueError("more after the object")
    return out


class LargeBodyRequest(Request):
    """A request whose large JSON body is decoded in a worker thread, and whose
    `messages` are counted before FastAPI validates them."""

    async def json(self) -> Any:
        body = await self.body()
        settings = self.app.state.settings
        most = settings.max_messages_per_write
        try:
            if len(body) <= settings.loop_write_max_bytes:
                value = strict_json.loads(body)
                count_messages(value, most)
                return value
            return await asyncio.to_thread(decode_in_parts, body, most)
        except (TooManyMessages, TooManyMembers) as too_many:
            raise too_many.answer() from None
        except strict_json.RepeatedKey as repeated:  # (what the caller meant is unknown)
            raise ReadingBodyFailed(InvalidInput(f"the body is ambiguous: {repeated}")) from None


class LargeBodyRoute(AccessLoggedRoute):
    """An access-logged route whose large JSON body is decoded off the event loop."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(LargeBodyRequest(request.scope, request.receive))

        return handle
