"""Request ids and log lines: the id of each request, in its response header and in every
line logged while it is answered; `serve`'s logging as plain text or JSON lines.

The id is the caller's `X-Request-ID` when it is a sane token (a proxy's or a client's,
so one id follows a request through every log), else one made here. Only `serve`
configures logging (`log_config`): a host that mounts the app keeps its own.
"""

from __future__ import annotations

import json
import logging
import re
import uuid
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

HEADER = b"x-request-id"
# Printable ASCII without spaces or quotes, at most 128 characters: safe in a header, a
# log line and a span attribute. Anything else is replaced, not cleaned up.
SANE_ID = re.compile(rb"[A-Za-z0-9._:/+=@-]{1,128}")
current_request_id: ContextVar[str | None] = ContextVar("request_id", default=None)


class RequestIds:
    """Gives every HTTP request an id, answers it in `X-Request-ID`, and keeps it in
    `current_request_id` while the request is answered."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = next((v for k, v in scope["headers"] if k == HEADER), None)
        raw = given if given is not None and SANE_ID.fullmatch(given) else None
        request_id = raw.decode("ascii") if raw is not None else uuid.uuid4().hex
        header = (HEADER, request_id.encode("ascii"))

        async def send_with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", ()), header]
            await send(message)

        token = current_request_id.set(request_id)
        try:
            await self.app(scope, receive, send_with_id)
        finally:
            current_request_id.reset(token)


class JsonLines(logging.Formatter):
    """One JSON object a line: time (UTC), level, logger, message, the request id when
    there is one, an access line's fields, and the traceback of an exception."""

    # uvicorn's access line: '%s - "%s %s HTTP/%s" %d' % these.
    ACCESS_FIELDS = ("client", "method", "path", "http_version", "status")

    def format(self, record: logging.LogRecord) -> str:
        line: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
        }
        request_id = current_request_id.get()
        if request_id is not None:
            line["request_id"] = request_id
        args = record.args
        if record.name == "uvicorn.access" and isinstance(args, tuple) and len(args) == 5:
            line.update(zip(self.ACCESS_FIELDS, args, strict=True))
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, ensure_ascii=False, default=str)


def log_config(log_format: str) -> dict[str, Any] | None:
    """`serve`'s logging (a `logging.config.dictConfig`, which uvicorn applies in every
    worker): None keeps uvicorn's plain lines; "json" makes every logger, uvicorn's, ours
    and the libraries', write JSON lines to stderr."""
    if log_format != "json":
        return None
    handler = {"class": "logging.StreamHandler", "formatter": "json", "stream": "ext://sys.stderr"}
    quiet = {"handlers": [], "propagate": True}  # uvicorn's loggers: the root's handler
    return {
        "version": 1,
        "disable_existing_loggers": False,
        "formatters": {"json": {"()": f"{__name__}.JsonLines"}},
        "handlers": {"json": handler},
        "root": {"handlers": ["json"], "level": "INFO"},
        "loggers": {"uvicorn": quiet, "uvicorn.error": quiet, "uvicorn.access": quiet},
    }
