"""The blocking Python client of the HTTP API: `LedgerClient` (httpx; its asyncio twin,
`AsyncLedgerClient`, is in `client_async.py`).

    with LedgerClient("http://127.0.0.1:8080", api_key="sl_...") as ledger:
        ledger.put("user-42/chat", {"role": "user", "content": "hi"})
        ledger.get("user-42/chat", token_limit=3000)

Both build the same requests (`Request`); only sending differs. Reads return the same
`ChatMessage` values as the in-process `Ledger` (`.role`, `.blocks`, `.content`,
`to_dict()`). A 4xx/5xx answer raises `LedgerAPIError` carrying the API's error code,
message and details. Every write carries an Idempotency-Key (yours, or a fresh one), so a
call whose connection failed, or that met a 503, is sent again (up to three times) and
applied once. A read of a session the client wrote carries its last write's version as
`min_version`: it reads its own writes, whichever server process (or read replica) answers.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator
from datetime import datetime

import httpx
from typing_extensions import Unpack

from session_ledger.domain.messages import ChatMessage

from .client_requests import (
    AsOf,
    LedgerAPIError,
    MessageLike,
    Request,
    Requests,
    T,
    WriteOptions,
    WrittenVersions,
    client_kwargs,
    export_request,
    history_pages,
    read_messages,
    retry_wait,
    session_path,
)  # fmt: skip
from .schemas import (
    ApiKey,
    AuditTrailAnswer,
    CreatedApiKey,
    MessageList,
    SessionHeadAnswer,
    SessionKeys,
    Status,
    WriteAnswer,
)  # fmt: skip

__all__ = [
    "AsOf", "LedgerAPIError", "LedgerClient", "MessageLike",
    "WriteOptions", "session_path",
]  # fmt: skip


class LedgerClient:
    """Blocking client; one connection pool, close it (or use `with`)."""

    def __init__(
        self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:  # fmt: skip
        self.http = httpx.Client(**client_kwargs(base_url, api_key, timeout), transport=transport)
        self.versions = WrittenVersions()  # its writes' versions: it reads them back

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, call: Request[T]) -> T:
        result = call.parse(self._request(call))
        self.versions.note(call, result)
        return result

    def _request(self, call: Request[T]) -> httpx.Response:
        call = self.versions.applied(call)
        attempt = 0
        while True:
            try:
                response: httpx.Response | None = self.http.request(
                    call.method, call.path, params=call.params, headers=call.headers,
                    json=call.json,
                )  # fmt: skip
            except httpx.TransportError:
                response = None
                if retry_wait(attempt, None) is None:
                    raise
            wait = retry_wait(attempt, response)
            if wait is None and response is not None:
                return response
            time.sleep(wait or 0)
            attempt += 1

    def _messages(self, call: Request[MessageList]) -> list[ChatMessage]:
        return read_messages(self._request(call))

    def metrics(self) -> str:
        """The Prometheus text of the server process that answered."""
        response = self.http.get("/metrics")
        if response.status_code >= 400:
            raise LedgerAPIError.from_response(response)
        return response.text

    def put(self, key: str, message: MessageLike, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Append one message (creates the session)."""
        return self._send(Requests.put_messages(key, [message], **w))

    def put_messages(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteAnswer:
        """Append messages, all or none."""
        return self._send(Requests.put_messages(key, messages, **w))

    def set(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteAnswer:
        """Replace the whole history."""
        return self._send(Requests.set(key, messages, **w))

    def reset(self, key: str, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Clear the history."""
        return self._send(Requests.reset(key, **w))

    def delete_message(self, key: str, index: int, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Remove the message at `index`; the result's `removed` holds it."""
        return self._send(Requests.delete_message(key, index, **w))

    def delete_last_message(self, key: str, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Remove the newest message; the result's `removed` holds it."""
        return self._send(Requests.delete_last_message(key, **w))

    def archive_oldest(self, key: str, count: int, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Move the `count` oldest active messages to the archive."""
        return self._send(Requests.archive_oldest(key, count, **w))

    def get(
        self, key: str, *, token_limit: int | None = None, initial_token_count: int = 0,
        as_of_version: int | None = None, as_of: datetime | None = None,
        min_version: int | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The context window (ChatMemoryBuffer.get semantics), now or at a past point;
        `min_version`: of that version or a later one (a write's version: read-your-writes)."""
        past = AsOf(as_of_version, as_of)
        return self._messages(
            Requests.get(key, token_limit, initial_token_count, past, min_version)
        )

    def get_all(
        self, key: str, *, status: str = "active", offset: int = 0, limit: int | None = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
        min_version: int | None = None, last: int | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The whole history (or `limit` messages of it), oldest first, now or at a past
        point, read page by page (all of one version); `min_version` as in `get`; `last`:
        from the `last`-th newest message (the newest `last`), instead of an offset."""
        past = AsOf(as_of_version, as_of)
        pages = history_pages(
            Requests.get_all(key, status, offset, limit, past, min_version, last), limit
        )
        try:
            call = next(pages)
            while True:
                call = pages.send(self._request(call))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    def events(self, key: str, *, after: int = 0, limit: int = 100) -> AuditTrailAnswer:
        """A page of the session's audit trail; pass `next_after` back as `after`."""
        return self._send(Requests.events(key, after, limit))

    def export(
        self, key: str, *, format: str = "jsonl", as_of_version: int | None = None
    ) -> Iterator[bytes]:
        """The session's compliance export (auditor or admin key), as byte chunks (not
        lines) streamed from the server. Errors (404, 403, ...) raise here, before the
        first chunk; iterate to the end or close the iterator."""
        path, params = export_request(key, format, as_of_version)
        response = self.http.send(self.http.build_request("GET", path, params=params),
                                  stream=True)  # fmt: skip
        if response.status_code >= 400:
            response.read()
            response.close()
            raise LedgerAPIError.from_response(response)

        def chunks() -> Iterator[bytes]:
            try:
                yield from response.iter_bytes()
            finally:
                response.close()

        return chunks()

    def head(self, key: str, *, min_version: int | None = None) -> SessionHeadAnswer:
        """The session's version, counts and times (`min_version` as in `get`)."""
        return self._send(Requests.head(key, min_version))

    def keys(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 100,
        exclude_cleared: bool = False, order: str = "key",
    ) -> SessionKeys:  # fmt: skip
        """One page of session keys; pass `next_cursor` back as `cursor`. `exclude_cleared`
        leaves out sessions whose last change was a reset; `order="created"` lists them in
        the order they were made instead of by key."""
        return self._send(Requests.keys(prefix, cursor, limit, exclude_cleared, order))

    def create_key(self, role: str, name: str = "") -> CreatedApiKey:
        """A new API key of the caller's tenant (admin only); `.key` is its secret."""
        return self._send(Requests.create_key(role, name))

    def list_keys(self) -> list[ApiKey]:
        """The caller's tenant's API keys (admin only)."""
        return (self._send(Requests.list_keys())).keys

    def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke an API key of the caller's tenant (admin only)."""
        return self._send(Requests.revoke_key(key_id))

    def healthz(self) -> Status:
        """Liveness."""
        return self._send(Requests.status("/healthz"))

    def readyz(self) -> Status:
        """Readiness: raises LedgerAPIError (503) when the store is not ready."""
        return self._send(Requests.status("/readyz"))
