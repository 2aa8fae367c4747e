"""ASGI middleware: session keys routed undecoded, the request body size limit, and
the authentication of a request before its body is read."""

from __future__ import annotations

import json
from collections.abc import Iterable
from urllib.parse import quote_from_bytes

from starlette.requests import Request
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .admission import authenticate_first
from .http_errors import BodyTooLarge, ReadingBodyFailed

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


class AuthenticatedBodies:
    """Authenticate a request to one of `routes` (those behind `admission.enforce_limits`)
    before its body is read.

    FastAPI reads and decodes a route's JSON body before it solves the route's
    dependencies, `enforce_limits` (which authenticates) among them. Here the request's
    first read of its body (`receive`, once the router has matched its route) first
    authenticates it: without a valid key it answers the same 401 (or the failed
    authentications' 429) as the dependency would, and no byte of its body is read. The
    principal stays in `request.state`, where `enforce_limits` finds it. A read route,
    which reads no body, is authenticated by `enforce_limits` before anything reads.
    """

    def __init__(self, app: ASGIApp, routes: Iterable[BaseRoute]) -> None:
        self.app = app
        # By identity: the router puts the matched route in the scope (routes compare
        # by their path, endpoint and methods, and do not hash).
        self.routes = frozenset(id(route) for route in routes)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        checked = False

        async def authenticated() -> Message:
            nonlocal checked
            if not checked:
                checked = True
                if id(scope.get("route")) in self.routes:
                    try:
                        await authenticate_first(Request(scope))
                    except Exception as error:
                        raise ReadingBodyFailed(error) from error
            return await receive()

        await self.app(scope, authenticated, send)
