"""Python clients of the HTTP API: `LedgerClient` (sync) and `AsyncLedgerClient` (httpx).

    with LedgerClient("http://127.0.0.1:8080", api_key="sl_...") as ledger:
        ledger.put("user-42/chat", {"role": "user", "content": "hi"})
        ledger.get("user-42/chat", token_limit=3000)

Both build the same requests (`_Call`); only sending differs. A 4xx/5xx answer raises
`LedgerAPIError` carrying the API's error code, message and details.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from typing_extensions import Unpack

from .schemas import (
    ApiKey,
    ApiKeyList,
    AuditTrail,
    CreatedApiKey,
    Message,
    MessageList,
    SessionHead,
    SessionKeys,
    Status,
    WriteResult,
)  # fmt: skip

T = TypeVar("T", bound=BaseModel)


class WriteOptions(TypedDict, total=False):
    """Keyword arguments of every write."""

    if_match: int | str  # the version the session must be at (or an ETag, or "*")
    if_none_match: bool  # True: the session must not exist yet
    idempotency_key: str  # a retry with the same key and body is applied once
    reason: str  # why; kept in the audit trail


MessageLike = Mapping[str, Any] | BaseModel | Any  # a dict, a schema model or a ChatMessage


class LedgerAPIError(Exception):
    """The API answered with an error: `status`, `code`, `message`, `details`."""

    def __init__(self, status: int, code: str, message: str, details: dict[str, Any]) -> None:
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details

    @classmethod
    def from_response(cls, response: httpx.Response) -> LedgerAPIError:
        try:
            error = response.json()["error"]
            return cls(response.status_code, error["code"], error["message"], error["details"])
        except (ValueError, KeyError, TypeError):
            return cls(response.status_code, "http_error", response.text[:500], {})


def session_path(key: str, suffix: str = "") -> str:
    """The URL path of a session: the key percent-encoded as one segment, `/` included."""
    segment = quote(key, safe="")
    # "." and ".." would be removed from the path as dot segments.
    segment = {".": "%2E", "..": "%2E%2E"}.get(segment, segment)
    return f"/v1/sessions/{segment}{suffix}"


def message_json(message: MessageLike) -> dict[str, Any]:
    if isinstance(message, BaseModel):
        return message.model_dump(exclude_unset=True)
    if hasattr(message, "to_dict"):
        return dict(message.to_dict())
    return dict(message)


@dataclass(frozen=True)
class _Call(Generic[T]):
    method: str
    path: str
    model: type[T]
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None

    def parse(self, response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise LedgerAPIError.from_response(response)
        return self.model.model_validate_json(response.content)


def _write(
    method: str, path: str, json: Any = None, *, if_match: int | str | None = None,
    if_none_match: bool = False, idempotency_key: str | None = None, reason: str | None = None,
) -> _Call[WriteResult]:  # fmt: skip
    headers: dict[str, str] = {}
    if if_match is not None:
        headers["If-Match"] = f'"{if_match}"' if isinstance(if_match, int) else if_match
    if if_none_match:
        headers["If-None-Match"] = "*"
    if idempotency_key is not None:
        headers["Idempotency-Key"] = idempotency_key
    params = {"reason": reason} if reason is not None else {}
    return _Call(method, path, WriteResult, params, headers, json)


@dataclass(frozen=True)
class AsOf:
    """A point-in-time read: a version, or a time (naive means UTC), or neither (now)."""

    version: int | None = None
    time: datetime | None = None

    def params(self) -> dict[str, Any]:
        params: dict[str, Any] = {}
        if self.version is not None:
            params["as_of_version"] = self.version
        if self.time is not None:
            params["as_of"] = self.time.isoformat()
        return params


def _messages(messages: Iterable[MessageLike]) -> dict[str, Any]:
    return {"messages": [message_json(m) for m in messages]}


class _Calls:
    """The request of every API operation; write options are keyword arguments:
    if_match (a version or an ETag), if_none_match, idempotency_key, reason."""

    @staticmethod
    def put_messages(key: str, messages: Iterable[MessageLike], **w: Any) -> _Call[WriteResult]:
        return _write("POST", session_path(key, "/messages"), _messages(messages), **w)

    @staticmethod
    def set(key: str, messages: Iterable[MessageLike], **w: Any) -> _Call[WriteResult]:
        return _write("PUT", session_path(key, "/messages"), _messages(messages), **w)

    @staticmethod
    def reset(key: str, **w: Any) -> _Call[WriteResult]:
        return _write("DELETE", session_path(key, "/messages"), **w)

    @staticmethod
    def delete_message(key: str, index: int, **w: Any) -> _Call[WriteResult]:
        return _write("DELETE", session_path(key, f"/messages/{int(index)}"), **w)

    @staticmethod
    def delete_last_message(key: str, **w: Any) -> _Call[WriteResult]:
        return _write("DELETE", session_path(key, "/messages/last"), **w)

    @staticmethod
    def archive_oldest(key: str, count: int, **w: Any) -> _Call[WriteResult]:
        return _write("POST", session_path(key, "/archive"), {"count": count}, **w)

    @staticmethod
    def get(key: str, token_limit: int | None, initial_token_count: int,
            as_of: AsOf) -> _Call[MessageList]:  # fmt: skip
        params: dict[str, Any] = {"initial_token_count": initial_token_count, **as_of.params()}
        if token_limit is not None:
            params["token_limit"] = token_limit
        return _Call("GET", session_path(key, "/context"), MessageList, params)

    @staticmethod
    def get_all(key: str, status: str, offset: int, limit: int | None,
                as_of: AsOf) -> _Call[MessageList]:  # fmt: skip
        params: dict[str, Any] = {"status": status, "offset": offset, **as_of.params()}
        if limit is not None:
            params["limit"] = limit
        return _Call("GET", session_path(key, "/messages"), MessageList, params)

    @staticmethod
    def events(key: str, after: int, limit: int) -> _Call[AuditTrail]:
        params = {"after": after, "limit": limit}
        return _Call("GET", session_path(key, "/events"), AuditTrail, params)

    @staticmethod
    def head(key: str) -> _Call[SessionHead]:
        return _Call("GET", session_path(key), SessionHead)

    @staticmethod
    def keys(prefix: str, cursor: str | None, limit: int) -> _Call[SessionKeys]:
        params: dict[str, Any] = {"prefix": prefix, "limit": limit}
        if cursor is not None:
            params["cursor"] = cursor
        return _Call("GET", "/v1/sessions", SessionKeys, params)

    @staticmethod
    def create_key(role: str, name: str) -> _Call[CreatedApiKey]:
        return _Call("POST", "/v1/keys", CreatedApiKey, json={"role": role, "name": name})

    @staticmethod
    def list_keys() -> _Call[ApiKeyList]:
        return _Call("GET", "/v1/keys", ApiKeyList)

    @staticmethod
    def revoke_key(key_id: str) -> _Call[ApiKey]:
        return _Call("DELETE", f"/v1/keys/{quote(key_id, safe='')}", ApiKey)

    @staticmethod
    def status(path: str) -> _Call[Status]:
        return _Call("GET", path, Status)


def _client_kwargs(base_url: str, api_key: str | None, timeout: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return {"base_url": base_url, "headers": headers, "timeout": timeout}


class LedgerClient:
    """Blocking client; one connection pool, close it (or use `with`)."""

    def __init__(
        self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:  # fmt: skip
        self.http = httpx.Client(**_client_kwargs(base_url, api_key, timeout), transport=transport)

    def __enter__(self) -> LedgerClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.http.close()

    def _send(self, call: _Call[T]) -> T:
        response = self.http.request(
            call.method, call.path, params=call.params, headers=call.headers, json=call.json
        )
        return call.parse(response)

    def metrics(self) -> str:
        """The Prometheus text of the server process that answered."""
        response = self.http.get("/metrics")
        if response.status_code >= 400:
            raise LedgerAPIError.from_response(response)
        return response.text

    def put(self, key: str, message: MessageLike, **w: Unpack[WriteOptions]) -> WriteResult:
        """Append one message (creates the session)."""
        return self._send(_Calls.put_messages(key, [message], **w))

    def put_messages(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteResult:
        """Append messages, all or none."""
        return self._send(_Calls.put_messages(key, messages, **w))

    def set(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteResult:
        """Replace the whole history."""
        return self._send(_Calls.set(key, messages, **w))

    def reset(self, key: str, **w: Unpack[WriteOptions]) -> WriteResult:
        """Clear the history."""
        return self._send(_Calls.reset(key, **w))

    def delete_message(self, key: str, index: int, **w: Unpack[WriteOptions]) -> WriteResult:
        """Remove the message at `index`; the result's `removed` holds it."""
        return self._send(_Calls.delete_message(key, index, **w))

    def delete_last_message(self, key: str, **w: Unpack[WriteOptions]) -> WriteResult:
        """Remove the newest message; the result's `removed` holds it."""
        return self._send(_Calls.delete_last_message(key, **w))

    def archive_oldest(self, key: str, count: int, **w: Unpack[WriteOptions]) -> WriteResult:
        """Move the `count` oldest active messages to the archive."""
        return self._send(_Calls.archive_oldest(key, count, **w))

    def get(
        self, key: str, *, token_limit: int | None = None, initial_token_count: int = 0,
        as_of_version: int | None = None, as_of: datetime | None = None,
    ) -> list[Message]:  # fmt: skip
        """The context window (ChatMemoryBuffer.get semantics), now or at a past point."""
        past = AsOf(as_of_version, as_of)
        return (self._send(_Calls.get(key, token_limit, initial_token_count, past))).messages

    def get_all(
        self, key: str, *, status: str = "active", offset: int = 0, limit: int | None = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
    ) -> list[Message]:  # fmt: skip
        """The whole history (or a page of it), oldest first, now or at a past point."""
        past = AsOf(as_of_version, as_of)
        return (self._send(_Calls.get_all(key, status, offset, limit, past))).messages

    def events(self, key: str, *, after: int = 0, limit: int = 100) -> AuditTrail:
        """A page of the session's audit trail; pass `next_after` back as `after`."""
        return self._send(_Calls.events(key, after, limit))

    def head(self, key: str) -> SessionHead:
        """The session's version, counts and times."""
        return self._send(_Calls.head(key))

    def keys(self, *, prefix: str = "", cursor: str | None = None, limit: int = 100) -> SessionKeys:
        """One page of session keys; pass `next_cursor` back as `cursor`."""
        return self._send(_Calls.keys(prefix, cursor, limit))

    def create_key(self, role: str, name: str = "") -> CreatedApiKey:
        """A new API key of the caller's tenant (admin only); `.key` is its secret."""
        return self._send(_Calls.create_key(role, name))

    def list_keys(self) -> list[ApiKey]:
        """The caller's tenant's API keys (admin only)."""
        return (self._send(_Calls.list_keys())).keys

    def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke an API key of the caller's tenant (admin only)."""
        return self._send(_Calls.revoke_key(key_id))

    def healthz(self) -> Status:
        """Liveness."""
        return self._send(_Calls.status("/healthz"))

    def readyz(self) -> Status:
        """Readiness: raises LedgerAPIError (503) when the store is not ready."""
        return self._send(_Calls.status("/readyz"))


class AsyncLedgerClient:
    """The asyncio twin of LedgerClient: the same methods, awaited."""

    def __init__(
        self, base_url: str, api_key: str | None = None, *, timeout: float = 30.0,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:  # fmt: skip
        kwargs = _client_kwargs(base_url, api_key, timeout)
        self.http = httpx.AsyncClient(**kwargs, transport=transport)

    async def __aenter__(self) -> AsyncLedgerClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.http.aclose()

    async def _send(self, call: _Call[T]) -> T:
        response = await self.http.request(
            call.method, call.path, params=call.params, headers=call.headers, json=call.json
        )
        return call.parse(response)

    async def metrics(self) -> str:
        """The Prometheus text of the server process that answered."""
        response = await self.http.get("/metrics")
        if response.status_code >= 400:
            raise LedgerAPIError.from_response(response)
        return response.text

    async def put(self, key: str, message: MessageLike, **w: Unpack[WriteOptions]) -> WriteResult:
        """Append one message (creates the session)."""
        return await self._send(_Calls.put_messages(key, [message], **w))

    async def put_messages(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteResult:
        """Append messages, all or none."""
        return await self._send(_Calls.put_messages(key, messages, **w))

    async def set(
        self, key: str, messages: Iterable[MessageLike], **w: Unpack[WriteOptions]
    ) -> WriteResult:
        """Replace the whole history."""
        return await self._send(_Calls.set(key, messages, **w))

    async def reset(self, key: str, **w: Unpack[WriteOptions]) -> WriteResult:
        """Clear the history."""
        return await self._send(_Calls.reset(key, **w))

    async def delete_message(self, key: str, index: int, **w: Unpack[WriteOptions]) -> WriteResult:
        """Remove the message at `index`; the result's `removed` holds it."""
        return await self._send(_Calls.delete_message(key, index, **w))

    async def delete_last_message(self, key: str, **w: Unpack[WriteOptions]) -> WriteResult:
        """Remove the newest message; the result's `removed` holds it."""
        return await self._send(_Calls.delete_last_message(key, **w))

    async def archive_oldest(self, key: str, count: int, **w: Unpack[WriteOptions]) -> WriteResult:
        """Move the `count` oldest active messages to the archive."""
        return await self._send(_Calls.archive_oldest(key, count, **w))

    async def get(
        self, key: str, *, token_limit: int | None = None, initial_token_count: int = 0,
        as_of_version: int | None = None, as_of: datetime | None = None,
    ) -> list[Message]:  # fmt: skip
        """The context window (ChatMemoryBuffer.get semantics), now or at a past point."""
        past = AsOf(as_of_version, as_of)
        return (await self._send(_Calls.get(key, token_limit, initial_token_count, past))).messages

    async def get_all(
        self, key: str, *, status: str = "active", offset: int = 0, limit: int | None = None,
        as_of_version: int | None = None, as_of: datetime | None = None,
    ) -> list[Message]:  # fmt: skip
        """The whole history (or a page of it), oldest first, now or at a past point."""
        past = AsOf(as_of_version, as_of)
        return (await self._send(_Calls.get_all(key, status, offset, limit, past))).messages

    async def events(self, key: str, *, after: int = 0, limit: int = 100) -> AuditTrail:
        """A page of the session's audit trail; pass `next_after` back as `after`."""
        return await self._send(_Calls.events(key, after, limit))

    async def head(self, key: str) -> SessionHead:
        """The session's version, counts and times."""
        return await self._send(_Calls.head(key))

    async def keys(
        self, *, prefix: str = "", cursor: str | None = None, limit: int = 100
    ) -> SessionKeys:
        """One page of session keys; pass `next_cursor` back as `cursor`."""
        return await self._send(_Calls.keys(prefix, cursor, limit))

    async def create_key(self, role: str, name: str = "") -> CreatedApiKey:
        """A new API key of the caller's tenant (admin only); `.key` is its secret."""
        return await self._send(_Calls.create_key(role, name))

    async def list_keys(self) -> list[ApiKey]:
        """The caller's tenant's API keys (admin only)."""
        return (await self._send(_Calls.list_keys())).keys

    async def revoke_key(self, key_id: str) -> ApiKey:
        """Revoke an API key of the caller's tenant (admin only)."""
        return await self._send(_Calls.revoke_key(key_id))

    async def healthz(self) -> Status:
        """Liveness."""
        return await self._send(_Calls.status("/healthz"))

    async def readyz(self) -> Status:
        """Readiness: raises LedgerAPIError (503) when the store is not ready."""
        return await self._send(_Calls.status("/readyz"))
