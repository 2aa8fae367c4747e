"""Answers shared by the routes of one session: the version as an ETag, message lists
written from the stored canonical JSON as it is, the answer of a write, and any other
answer encoded by the route itself (`encoded`)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from fastapi import Response
from fastapi.responses import StreamingResponse
from pydantic import BaseModel

from session_ledger.domain.errors import SessionNotFound
from session_ledger.domain.ports import MessagesRead, WriteResult

from .access_logging import RECORDS_HEADER
from .schemas import WriteAnswer

JSON = "application/json"
STREAMED_CHARS = 1024 * 1024  # answers of more are encoded and sent in chunks of
CHUNK_CHARS = 64 * 1024


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
    response = _messages_response(read)
    etag(response, read.version)
    return response


def message_page(
    read: MessagesRead, tenant: str, key: str, held: frozenset[int] = frozenset()
) -> Response:
    """A `MessagePage` body, as `message_list` makes a `MessageList`, with the cursor of
    the page after it (`next_cursor`: of the same version), if one follows."""
    if read.version == 0:
        raise SessionNotFound(tenant, key)
    if read.version in held:
        return not_modified(read.version)
    following = "null" if read.next_after is None else f'"{page_cursor(read)}"'
    response = _messages_response(read, f',"next_cursor":{following}}}'.encode())
    etag(response, read.version)
    return response


def counted(response: Response, records: int) -> Response:
    """`response`, saying how many records it holds (the access log's count: a large
    answer is not parsed again on the event loop to count them)."""
    response.headers[RECORDS_HEADER] = str(records)
    return response


def encoded(answer: BaseModel, version: int | None = None) -> Response:
    """`answer` as its JSON, encoded where it is called, with `version` as its ETag (when
    given). A sync route's answer made here is encoded in the route's worker thread: a
    model it returned would be encoded by FastAPI on the event loop (a replay of a large
    window took 0.8 s there, every other request waiting). The bytes are those FastAPI
    would send for it (the response model's JSON, by alias); declare the model as the
    route's `response_model` for the OpenAPI document."""
    body = answer.__pydantic_serializer__.to_json(answer, by_alias=True)
    response = Response(body, media_type=JSON)
    if version is not None:
        etag(response, version)
    return response


def page_cursor(read: MessagesRead) -> str:
    """The cursor of the page after `read`: the version it is of and where it ends."""
    return f"{read.version}-{read.next_after}"


def _messages_response(read: MessagesRead, end: bytes = b"}") -> Response:
    """The messages as a JSON object (`end` closes it). A large answer is encoded and sent
    a chunk at a time: made whole, it was held four times over (its rows, their JSON
    joined, that string with its brackets, its bytes)."""
    texts = read.json()
    if sum(map(len, texts)) < STREAMED_CHARS:
        body = ",".join(texts).encode()
        whole = Response(b"".join((b'{"messages":[', body, b"]", end)), media_type=JSON)
        return counted(whole, len(texts))
    return counted(StreamingResponse(_chunks(texts, end), media_type=JSON), len(texts))


async def _chunks(texts: list[str], end: bytes) -> AsyncIterator[bytes]:
    yield b'{"messages":['
    start = 0
    while start < len(texts):
        stop, size = start, 0
        while stop < len(texts) and size < CHUNK_CHARS:
            size += len(texts[stop])
            stop += 1
        yield (("," if start else "") + ",".join(texts[start:stop])).encode()
        start = stop
    yield b"]" + end


def written(result: WriteResult, answer: type[WriteAnswer] = WriteAnswer, status_code: int = 200,
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
    return counted(response, len(result.removed)) if result.removed else response
