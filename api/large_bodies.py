"""Large JSON bodies decoded off the event loop.

FastAPI decodes a route's JSON body (`await request.json()`) on the event loop before
the route runs: 28 MiB of messages took 50-350 ms there, during which no other request
was served. A route of `LargeBodyRoute` hands FastAPI a request whose body, when larger
than `loop_write_max_bytes`, is decoded in a worker thread; a smaller one, as before, on
the loop, where a thread hand-off would cost more than the decoding.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from fastapi import Request, Response

from .access_logging import AccessLoggedRoute


class LargeBodyRequest(Request):
    """A request whose large JSON body is decoded in a worker thread."""

    async def json(self) -> Any:
        body = await self.body()
        if len(body) <= self.app.state.settings.loop_write_max_bytes:
            return await super().json()
        return await asyncio.to_thread(json.loads, body)


class LargeBodyRoute(AccessLoggedRoute):
    """An access-logged route whose large JSON body is decoded off the event loop."""

    def get_route_handler(self) -> Callable[[Request], Awaitable[Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            return await handler(LargeBodyRequest(request.scope, request.receive))

        return handle
