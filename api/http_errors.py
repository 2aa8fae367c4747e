"""The one table from exceptions to HTTP answers, and the handlers that apply it.

Every error leaves the API as `{"error": {"code", "message", "details"}}`. Routes raise
domain errors (or the auth ones); nothing below maps them case by case.
"""

from __future__ import annotations

import logging
from typing import Any

from eventsourcing import persistence
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from session_ledger.domain import errors as domain
from session_ledger.projections.driver_errors import POSTGRES

from .auth import Forbidden, Unauthenticated
from .keystore import KeyNotFound
from .live_tails import TooManyTails
from .ratelimit_budget import QuotaExceeded, RateLimited, Refused
from .schemas import ErrorResponse

log = logging.getLogger("session_ledger.api")


class BodyTooLarge(StarletteHTTPException):
    """The request body is over `max_body_bytes` (HTTP 413).

    An HTTPException, because FastAPI turns any other error raised while it reads the
    body into a 400.
    """

    def __init__(self, message: str) -> None:
        super().__init__(413, message)


class ReadingBodyFailed(StarletteHTTPException):
    """An error raised while FastAPI reads or decodes a request's body, answered as the
    error it carries (`error`): the request's authentication, which runs before its body
    is read (middleware.AuthenticatedBodies), or a write's messages over their limit,
    found while they are decoded (large_bodies.py).

    An HTTPException, as BodyTooLarge, because FastAPI turns any other error raised while
    it reads the body into a 400.
    """

    def __init__(self, error: Exception) -> None:
        super().__init__(500, str(error))
        self.error = error


class PreconditionFailed(Exception):
    """`If-Match: *` on a session that does not exist (HTTP 412)."""


class LastEventIdInvalid(Exception):
    """A live tail's `Last-Event-ID` that is no id: the tail could have sent (HTTP 400)."""


# Most specific class first wins (looked up along the exception's MRO).
STATUS: dict[type[Exception], tuple[int, str]] = {
    Unauthenticated: (401, "unauthenticated"),
    Forbidden: (403, "forbidden"),
    KeyNotFound: (404, "key_not_found"),
    BodyTooLarge: (413, "body_too_large"),
    LastEventIdInvalid: (400, "invalid_last_event_id"),
    PreconditionFailed: (412, "precondition_failed"),
    RateLimited: (429, "rate_limited"),
    TooManyTails: (429, "too_many_tails"),
    QuotaExceeded: (429, "quota_exceeded"),
    domain.AnswerTooLarge: (413, "answer_too_large"),
    domain.PayloadTooLarge: (413, "payload_too_large"),
    domain.InvalidInput: (422, "invalid_input"),
    domain.SessionNotFound: (404, "session_not_found"),
    domain.MessageNotFound: (404, "message_not_found"),
    domain.StateNotFound: (404, "state_not_found"),
    domain.VersionConflict: (412, "version_conflict"),
    domain.IdempotencyKeyReused: (422, "idempotency_key_reused"),
    domain.StoreUnavailable: (503, "store_unavailable"),
    domain.SessionErasedError: (410, "session_erased"),
    domain.LegalHold: (409, "legal_hold"),
    domain.HoldConflict: (409, "hold_conflict"),
    domain.HoldNotFound: (404, "hold_not_found"),
    domain.EncryptionRequired: (409, "encryption_required"),
    domain.StreamConflict: (409, "stream_conflict"),
    domain.StreamNotFound: (404, "stream_not_found"),
    domain.StoreNotReady: (503, "store_not_ready"),
    domain.CheckpointNotFound: (404, "checkpoint_not_found"),
    domain.LedgerError: (500, "ledger_error"),
}
# A connection lost, refused or not had in time: the store, not the request, failed.
CONNECTION_ERRORS = (persistence.OperationalError, persistence.InterfaceError, *POSTGRES.lost)
ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    status: {"model": ErrorResponse, "description": description}
    for status, description in {
        400: "Malformed JSON body; a live tail's Last-Event-ID that is none of its id: "
        "(invalid_last_event_id).",
        401: "No API key, or an unknown or revoked one.",
        403: "The key's role may not do this.",
        404: "No such session (in the caller's tenant), message, past version, key, "
        "checkpoint, stream, or legal hold of that reference (hold_not_found).",
        409: "A write lost too many races with other writers (retry); a stream not open; or a "
        "compliance command refused: legal_hold, hold_conflict, encryption_required.",
        410: "The session was erased (session_erased): when, why and on what basis.",
        412: "If-Match / If-None-Match precondition failed; nothing written.",
        413: "Body, message or write over the configured limits; a context window over "
        "LEDGER_MAX_ANSWER_BYTES (answer_too_large).",
        422: "Invalid input: fields, headers, messages, session key.",
        429: "Over a rate limit or quota of the API key or its tenant, or as many live tails "
        "open as it may hold (too_many_tails); see Retry-After.",
        503: "The store is unreachable (store_unavailable, with Retry-After) or not "
        "migrated (store_not_ready).",
    }.items()
}


def error_response(
    status: int, code: str, message: str, details: dict[str, Any] | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:  # fmt: skip
    body = {"error": {"code": code, "message": message, "details": details or {}}}
    return JSONResponse(body, status_code=status, headers=headers)


def _lookup(exc: BaseException) -> tuple[int, str]:
    for cls in type(exc).__mro__:
        if cls in STATUS:
            status, code = STATUS[cls]
            return status, getattr(exc, "code", code) if status != 500 else code
    return 500, "internal_error"


def store_unavailable(exc: BaseException) -> domain.StoreUnavailable | None:
    """The typed error for a library or driver error that says the store is unreachable."""
    if isinstance(exc, domain.StoreUnavailable):
        return exc
    if isinstance(exc, CONNECTION_ERRORS):
        # The driver's message names hosts and ports: it goes to the log, not the client.
        return domain.StoreUnavailable("the store is unavailable; retry later")
    return None


async def handle_error(request: Request, exc: Exception) -> JSONResponse:
    if isinstance(exc, ReadingBodyFailed):
        exc = exc.error
    unavailable = store_unavailable(exc)
    if unavailable is not None:
        log.warning("store unavailable on %s %s: %s", request.method, request.url.path, exc)
        exc = unavailable
    status, code = _lookup(exc)
    details: dict[str, Any] = {}
    headers: dict[str, str] = {}
    message = str(exc) or code.replace("_", " ")
    if isinstance(exc, domain.VersionConflict):
        details = {"expected_version": exc.expected, "current_version": exc.actual}
        headers["ETag"] = f'"{exc.actual}"'
        if "if-match" not in request.headers and "if-none-match" not in request.headers:
            # The caller set no precondition: the ledger gave up retrying a busy session.
            status, code = 409, "write_conflict"
    elif isinstance(exc, domain.SessionErasedError):
        details = {"erased_at": exc.erased_at.isoformat(), "reason": exc.reason,
                   "basis": exc.basis}  # fmt: skip
    elif isinstance(exc, domain.HoldNotFound):
        details = {"reference": exc.reference, "holds": list(exc.held)}
    elif isinstance(exc, domain.InvalidMessage) and exc.index is not None:
        details = {"index": exc.index}
    elif isinstance(exc, domain.StoreUnavailable):
        headers["Retry-After"] = str(request.app.state.settings.retry_after_seconds)
    elif isinstance(exc, Refused):
        details = {"limit": exc.limit, "retry_after_seconds": round(exc.retry_after, 3)}
        headers["Retry-After"] = exc.retry_after_header
    elif isinstance(exc, Unauthenticated):
        headers["WWW-Authenticate"] = 'Bearer realm="session-ledger"'
    if status == 500:
        log.exception("unhandled error on %s %s", request.method, request.url.path)
        message = "internal error; the server log has the details"
    return error_response(status, code, message, details, headers)


def _validation_details(exc: RequestValidationError) -> list[dict[str, Any]]:
    # Echoing `input` back could repeat a 40 MB body or bytes JSON cannot hold.
    return [
        {"loc": [str(part) for part in e.get("loc", ())],
         "type": e.get("type", ""), "msg": e.get("msg", "")}
        for e in exc.errors()[:50]
    ]  # fmt: skip


async def handle_validation(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, RequestValidationError)
    errors = _validation_details(exc)
    if any(e["type"] == "json_invalid" for e in errors):
        return error_response(400, "malformed_json", "the request body is not valid JSON",
                              {"errors": errors})  # fmt: skip
    first = errors[0] if errors else {"loc": [], "msg": "invalid request"}
    where = ".".join(first["loc"])
    message = f"{where}: {first['msg']}"
    if first["loc"] == ["query", "as_of"] and " " in request.query_params.get("as_of", ""):
        # A '+' typed into a URL's query string arrives as a space: the offset was lost.
        message += " (a '+' in a query string means a space: send the offset as %2B00:00)"
    return error_response(422, "invalid_request", message, {"errors": errors})


async def handle_http(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, StarletteHTTPException)
    # FastAPI answers 400 itself when the body cannot be parsed (e.g. nested too deep).
    codes = {400: "malformed_json", 404: "not_found", 405: "method_not_allowed"}
    code = codes.get(exc.status_code, "http_error")
    return error_response(exc.status_code, code, str(exc.detail), headers=dict(exc.headers or {}))


def register(app: FastAPI) -> None:
    """Install the handlers: once, for every route."""
    app.add_exception_handler(RequestValidationError, handle_validation)
    app.add_exception_handler(StarletteHTTPException, handle_http)
    app.add_exception_handler(ReadingBodyFailed, handle_error)
    for cls in (*STATUS, *CONNECTION_ERRORS):
        app.add_exception_handler(cls, handle_error)
    app.add_exception_handler(Exception, handle_error)
