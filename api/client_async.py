"""The asyncio client of the HTTP API: `AsyncLedgerClient`, the twin of `LedgerClient`
(`client.py`), built on the same requests (`client_requests.py`)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterable
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


class AsyncLedgerClient:
    """The asyncio twin of LedgerClient: the same methods, awaited."""

    def __init__(
        self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:  # fmt: skip
        kwargs = client_kwargs(base_url, api_key, timeout)
        self.http = httpx.AsyncClient(**kwargs, transport=transport)
        self.versions = WrittenVersions()  # its writes' versions: it reads them back

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _send(self, call: Request[T]) -> T:
        result = call.parse(await self._request(call))
        self.versions.note(call, result)
        return result

    async def _request(self, call: Request[T]) -> httpx.Response:
        call = self.versions.applied(call)
        attempt = 0
        while True:
            try:
                response: httpx.Response | None = await self.http.request(
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
            await asyncio.sleep(wait or 0)
            attempt += 1

    async def _messages(self, call: Request[MessageList]) -> list[ChatMessage]:
        return read_messages(await self._request(call))

    async def metrics(self) -> str:
        """The Prometheus text of the server process that answered."""
        response = await self.http.get("/metrics")
        if response.status_code >= 400:
            raise LedgerAPIError.from_response(response)
        return response.text

    async def put(self, key: str, message: MessageLike, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Append one message (creates the session)."""
        return await self._send(Requests.put_messages(key, [message], **w))

    async def put_messages(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteAnswer:
        """Append messages, all or none."""
        return await self._send(Requests.put_messages(key, messages, **w))

    async def set(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteAnswer:
        """Replace the whole history."""
        return await self._send(Requests.set(key, messages, **w))

    async def reset(self, key: str, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Clear the history."""
        return await self._send(Requests.reset(key, **w))

    async def delete_message(self, key: str, index: int, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Remove the message at `index`; the result's `removed` holds it."""
        return await self._send(Requests.delete_message(key, index, **w))

    async def delete_last_message(self, key: str, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Remove the newest message; the result's `removed` holds it."""
        return await self._send(Requests.delete_last_message(key, **w))

    async def archive_oldest(self, key: str, count: int, **w: Unpack[WriteOptions]) -> WriteAnswer:
        """Move the `count` oldest active messages to the archive."""
        return await self._send(Requests.archive_oldest(key, count, **w))

    async def get(
        self, key: str, *, token_limit: int | None = None, initial_token_count: int = 0,
        as_of_version: int | None = None, as_of: datetime | None = None,
        min_version: int | None = None,
    ) -> list[ChatMessage]:  # fmt: skip
        """The context window (ChatMemoryBuffer.get semantics), now or at a past point;
        `min_version`: of that version or a later one (a write's version: read-your-writes)."""
        past = AsOf(as_of_version, as_of)
        return await self._messages(
            Requests.get(key, token_limit, initial_token_count, past, min_version)
        )

    async def get_all(
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
                call = pages.send(await self._request(call))
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]

    async def events(self, key: str, *, after: int = 0, limit: int = 100) -> AuditTrailAnswer:
        """A page of the session's audit trail; pass `next_after` back as `after`."""
        return await self._send(Requests.events(key, after, limit))

    async def export(
        self, key: str, *, format: str = "jsonl", as_of_version: int | None = None
    ) -> AsyncIterator[bytes]:
        """The session's compliance export (auditor or admin key), as byte chunks (not
        lines) streamed from the server: `async for chunk in await client.export(key)`.
        Errors (404, 403, ...) raise here, before the first chunk."""
        path, params = export_request(key, format, as_of_version)
        request = self.http.build_request("GET", path, params=params)
        response = await self.http.send(request, stream=True)
        if response.status_code >= 400:
            await response.aread()
            await response.aclose()
            raise LedgerAPIError.from_response(response)

        async def chunks() -> AsyncIterator[bytes]:
            try:
                async for chunk in response.aiter_bytes():
                    yield chunk
            finally:
                await response.aclose()

        return chunks()

    async def head(self, key: str, *, min_version: int | None = None) -> SessionHeadAnswer:
        """The session's version, counts and times (`min_version` as in `get`)."""
        return await self._send(Requests.head(key, min_version))

    async def keys(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 100,
        exclude_cleared: bool = False, order: str = "key",
    ) -> SessionKeys:  # fmt: skip
        """One page of session keys; pass `next_cursor` back as `cursor`. `exclude_cleared`
        leaves out sessions whose last change was a reset; `order="created"` lists them in
        the order they were made instead of by key."""
        return await self._send(Requests.keys(prefix, cursor, limit, exclude_cleared, order))

    async def create_key(self, role: str, name: str = "") -> CreatedApiKey:
        """A new API key of the caller's tenant (admin only); `.key` is its secret."""
        return await self._send(Requests.create_key(role, name))

    async def list_keys(self) -> list[ApiKey]:
        """The caller's tenant's API keys (admin only)."""
        return (await self._send(Requests.list_keys())).keys

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke an API key of the caller's tenant (admin only)."""
        return await self._send(Requests.revoke_key(key_id))

    async def healthz(self) -> Status:
        """Liveness."""
        return await self._send(Requests.status("/healthz"))

    async def readyz(self) -> Status:
        """Readiness: raises LedgerAPIError (503) when the store is not ready."""
        return await self._send(Requests.status("/readyz"))
