"""Large JSON bodies decoded off the event loop.

FastAPI decodes a route's JSON body (`await request.json()`) on the event loop before
the route runs: 28 MiB of messages took 50-350 ms there, during which no other request
was served. A route of `LargeBodyRoute` hands FastAPI a request whose body, when larger
than `loop_write_max_bytes`, is decoded in a worker thread, in parts (`decode_in_parts`:
json's decoder holds the GIL for a whole call); a smaller one, as before, on the loop,
where a thread hand-off would cost more than the decoding.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response

from .access_logging import AccessLoggedRoute

_DECODER = json.JSONDecoder()
_SPACE = re.compile(r"[ \t\n\r]*")


def decode_in_parts(body: bytes) -> Any:
    """`json.loads(body)`, each member of the top object, and each item of an array there
    (a write's messages), decoded by a call of its own: json's decoder holds the GIL for
    the whole of one call (28 MiB of messages: 50-90 ms in one piece, while no other
    thread of the server ran), and between calls other threads take their turns. Any
    other shape, or invalid JSON, is left to `json.loads` (its value, or its error)."""
    try:
        return _object_in_parts(body.decode("utf-8"))
    except (ValueError, IndexError):  # (UnicodeDecodeError too: json.loads detects others)
        return json.loads(body)


def _object_in_parts(text: str) -> dict[str, Any]:
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
        key, at = decode(text, at)
        at = space(text, at).end()
        if text[at] != ":":
            raise ValueError("no colon")
        at = space(text, at + 1).end()
        if text[at] == "[":
            items: list[Any] = []
            at = space(text, at + 1).end()
            while text[at] != "]":
                if items:
                    if text[at] != ",":
                        raise ValueError("no comma")
                    at = space(text, at + 1).end()
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
    """A request whose large JSON body is decoded in a worker thread."""

    async def json(self) -> Any:
        body = await self.body()
        if len(body) <= self.app.state.settings.loop_write_max_bytes:
            return await super().json()
        return await asyncio.to_thread(decode_in_parts, body)


class LargeBodyRoute(AccessLoggedRoute):
    """An access-logged route whose large JSON body is decoded off the event loop."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(LargeBodyRequest(request.scope, request.receive))

        return handle
