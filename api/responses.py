"""Answers shared by the routes of one session: the version as an ETag, message lists
written from the stored canonical JSON as it is, and the answer of a write."""

from __future__ import annotations

from typing import Any

from fastapi import Response

from session_ledger.domain.errors import SessionNotFound
from session_ledger.domain.ports import MessagesRead
from session_ledger.domain.ports import WriteResult as Written

from .schemas import WriteResult


def etag(response: Response, version: int) -> None:
    response.headers["ETag"] = f'"{version}"'


def not_modified(version: int) -> Response:
    """304: the caller holds this version already (If-None-Match)."""
    response = Response(status_code=304)
    etag(response, version)
    return response


def message_list(
    read: MessagesRead, tenant: str, key: str, held: frozenset[int] = frozenset()
) -> Response:
    """A `MessageList` body made of the messages' stored canonical JSON, as it is (decoding
    each message, validating it and encoding it again cost about 1 ms per 60 messages),
    with the version the read found as its ETag: the body and its ETag come from one read.
    404 when the read found no session; 304 when it found a version in `held`."""
    if read.version == 0:
        raise SessionNotFound(tenant, key)
    if read.version in held:
        return not_modified(read.version)
    response = Response(
        ('{"messages":[' + ",".join(read.json()) + "]}").encode(), media_type="application/json"
    )
    etag(response, read.version)
    return response


def written(result: Written, answer: type[WriteResult] = WriteResult, status_code: int = 200,
            **extra: Any) -> Response:  # fmt: skip
    """A write's answer (`answer`, with `extra` fields, e.g. a stream's id), its version as
    the ETag. Made as a Response here: a route that returns a model has FastAPI validate
    it again, in a worker thread (a second hand-off per write)."""
    body = answer(
        version=result.version, message_count=result.message_count, replayed=result.replayed,
        removed=[m.to_dict() for m in result.removed], **extra,
    )  # fmt: skip
    response = Response(body.model_dump_json(), status_code, media_type="application/json")
    etag(response, result.version)
    if result.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return response
