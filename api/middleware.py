"""ASGI middleware: session keys routed undecoded, and the request body size limit."""

from __future__ import annotations

import json
from urllib.parse import quote_from_bytes

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .http_errors import BodyTooLarge

SESSIONS_PREFIX = b"/v1/sessions/"
# Everything a raw path may hold as itself; other bytes (raw UTF-8 from a lax client)
# get percent-encoded so the routed path stays ASCII.
PATH_SAFE = "/%!$&'()*+,;=:@-._~"


class RawSessionPath:
    """Route `/v1/sessions/...` on the raw path, so `%2F` inside a key stays one segment.

    Servers decode the path before routing, which would turn the key `a/b` into two
    segments; the raw path keeps it whole, and `deps.decode_session_key` decodes it.
    """

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw = scope.get("raw_path") if scope["type"] == "http" else None
        if raw and raw.startswith(SESSIONS_PREFIX):
            # In place: the metrics middleware outside reads the matched route from it.
            scope["path"] = quote_from_bytes(raw, safe=PATH_SAFE)
        await self.app(scope, receive, send)


class BodyLimit:
    """Refuse bodies over `max_bytes`: by Content-Length up front, else while streaming."""

    def __init__(self, app: ASGIApp, max_bytes: int) -> None:
        self.app = app
        self.max_bytes = max_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        length = dict(scope["headers"]).get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.max_bytes:
            await self._refuse(send)
            return
        seen = 0

        async def counted() -> Message:
            nonlocal seen
            message = await receive()
            seen += len(message.get("body", b""))
            if seen > self.max_bytes:
                raise BodyTooLarge(self.message)
            return message

        await self.app(scope, counted, send)

    @property
    def message(self) -> str:
        return f"the request body is over the limit of {self.max_bytes} bytes"

    async def _refuse(self, send: Send) -> None:
        body = json.dumps({"error": {"code": "body_too_large", "message": self.message,
                                     "details": {"max_body_bytes": self.max_bytes}}})  # fmt: skip
        await send({"type": "http.response.start", "status": 413, "headers": [
            (b"content-type", b"application/json"), (b"connection", b"close"),
        ]})  # fmt: skip
        await send({"type": "http.response.body", "body": body.encode()})
