"""The requests of the HTTP API, built once for both clients (`client.py`): paths with the
session key encoded, write-option headers, and parsing answers or raising LedgerAPIError."""

from __future__ import annotations

import uuid
from collections.abc import Generator, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from typing import Any, Generic, TypedDict, TypeVar
from urllib.parse import quote

import httpx
from pydantic import BaseModel
from pydantic_core import from_json

from session_ledger.domain import errors
from session_ledger.domain.errors import LedgerError, SessionNotFound
from session_ledger.domain.messages import ChatMessage

from .schemas import (
    ApiKey,
    ApiKeyList,
    AuditTrailAnswer,
    CreatedApiKey,
    MessageList,
    MessagePage,
    SessionHeadAnswer,
    SessionKeys,
    Status,
    WriteAnswer,
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

    def domain_error(self, key: str, expected: int | None = None) -> LedgerError:
        """The error the in-process `Ledger` raises where the API answered this one, for
        an adapter that is the same on both (`key`: the session; `expected`: the version
        the write expected)."""
        if self.code == "session_not_found":
            return SessionNotFound(str(self.details.get("tenant", "of this API key")), key)
        if self.code in ("version_conflict", "precondition_failed"):
            wanted = int(self.details.get("expected", expected or 0) or 0)
            return errors.VersionConflict(key, wanted, int(self.details.get("actual", -1)))
        error = _ERRORS_BY_CODE.get(self.code, LedgerError)
        try:
            return error(self.message)
        except TypeError:  # (one made of its parts, as SessionErasedError: the API's message)
            made = error.__new__(error)
            Exception.__init__(made, self.message)
            return made


def _subclasses(cls: type[LedgerError]) -> list[type[LedgerError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _subclasses(sub))]


# The API names each domain error by its `code`
_ERRORS_BY_CODE = {c.code: c for c in _subclasses(LedgerError)}


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
class Request(Generic[T]):
    """One API call, with what it needs to be sent again: a read, or a write whose
    Idempotency-Key makes a second delivery a replay."""

    method: str
    path: str
    model: type[T]
    params: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    json: Any = None
    session: str | None = None  # the key of the session it writes or reads, if one

    def parse(self, response: httpx.Response) -> T:
        if response.status_code >= 400:
            raise LedgerAPIError.from_response(response)
        return self.model.model_validate_json(response.content)


def read_messages(response: httpx.Response) -> list[ChatMessage]:
    """A `MessageList` answer as the values the in-process `Ledger` reads return. The
    server sends each message's stored canonical JSON, validated when it was written,
    so its fields are taken as they are."""
    return read_page(response)[0]


def read_page(response: httpx.Response) -> tuple[list[ChatMessage], str | None]:
    """A `MessagePage` answer: its messages (as `read_messages`) and its `next_cursor`."""
    if response.status_code >= 400:
        raise LedgerAPIError.from_response(response)
    found = from_json(response.content)
    messages = [ChatMessage(m["role"], m["blocks"], m["additional_kwargs"])
                for m in found["messages"]]  # fmt: skip
    return messages, found.get("next_cursor")


def history_pages(
    first: Request[MessagePage], limit: int | None
) -> Generator[Request[MessagePage], httpx.Response, list[ChatMessage]]:
    """The history a read asks for (`first`, its first page), page after page through
    their cursors until `limit` messages (None: all): a plan each client runs, sending
    each request yielded and sending its answer back in."""
    messages, cursor = read_page((yield first))
    while cursor is not None and (limit is None or len(messages) < limit):
        params = {"status": first.params["status"], "cursor": cursor}
        if limit is not None:
            params["limit"] = limit - len(messages)
        page, cursor = read_page((yield replace(first, params=params)))
        messages += page
    return messages


def _write(
    method: str, key: str, suffix: str, json: Any = None, *, if_match: int | str | None = None,
    if_none_match: bool = False, idempotency_key: str | None = None, reason: str | None = None,
) -> Request[WriteAnswer]:  # fmt: skip
    headers: dict[str, str] = {}
    if if_match is not None:
        headers["If-Match"] = f'"{if_match}"' if isinstance(if_match, int) else if_match
    if if_none_match:
        headers["If-None-Match"] = "*"
    # Every write carries a key, the caller's or a fresh one, so a retry of it (after a
    # dropped connection or a 503) is applied once.
    headers["Idempotency-Key"] = idempotency_key or f"client-{uuid.uuid4().hex}"
    params = {"reason": reason} if reason is not None else {}
    return Request(method, session_path(key, suffix), WriteAnswer, params, headers, json, key)


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


def _at_least(params: dict[str, Any], min_version: int | None) -> dict[str, Any]:
    """`params` with `min_version`: the read is of that version or a later one (a version
    a write answered: read-your-writes, also where read replicas serve reads)."""
    return params if min_version is None else {**params, "min_version": min_version}


class WrittenVersions:
    """The version a client's last write of each session answered (the newest `kept`
    sessions), sent back as `min_version` on its reads of that session: the client reads
    its own writes through any server process, also where read replicas serve reads."""

    def __init__(self, kept: int = 10_000) -> None:
        self.kept = kept
        self._versions: dict[str, int] = {}

    def note(self, call: Request[Any], result: Any) -> None:
        if call.session is not None and isinstance(result, WriteAnswer):
            self._versions.pop(call.session, None)
            self._versions[call.session] = result.version
            if len(self._versions) > self.kept:
                self._versions.pop(next(iter(self._versions)), None)

    def applied(self, call: Request[T]) -> Request[T]:
        """`call`, a read of a session this client wrote, with that version as its least."""
        written = None if call.method != "GET" else self._versions.get(call.session or "")
        if written is None:
            return call
        least = max(written, call.params.get("min_version") or 0)
        return replace(call, params={**call.params, "min_version": least})


def _messages(messages: Iterable[MessageLike]) -> dict[str, Any]:
    return {"messages": [message_json(m) for m in messages]}


class Requests:
    """The request of every API operation; write options are keyword arguments:
    if_match (a version or an ETag), if_none_match, idempotency_key, reason."""

    @staticmethod
    def put_messages(key: str, messages: Iterable[MessageLike], **w: Any) -> Request[WriteAnswer]:
        return _write("POST", key, "/messages", _messages(messages), **w)

    @staticmethod
    def set(key: str, messages: Iterable[MessageLike], **w: Any) -> Request[WriteAnswer]:
        return _write("PUT", key, "/messages", _messages(messages), **w)

    @staticmethod
    def reset(key: str, **w: Any) -> Request[WriteAnswer]:
        return _write("DELETE", key, "/messages", **w)

    @staticmethod
    def delete_message(key: str, index: int, **w: Any) -> Request[WriteAnswer]:
        return _write("DELETE", key, f"/messages/{int(index)}", **w)

    @staticmethod
    def delete_last_message(key: str, **w: Any) -> Request[WriteAnswer]:
        return _write("DELETE", key, "/messages/last", **w)

    @staticmethod
    def archive_oldest(key: str, count: int, **w: Any) -> Request[WriteAnswer]:
        return _write("POST", key, "/archive", {"count": count}, **w)

    @staticmethod
    def get(key: str, token_limit: int | None, initial_token_count: int, as_of: AsOf,
            min_version: int | None = None) -> Request[MessageList]:  # fmt: skip
        params: dict[str, Any] = {"initial_token_count": initial_token_count, **as_of.params()}
        if token_limit is not None:
            params["token_limit"] = token_limit
        return Request("GET", session_path(key, "/context"), MessageList,
                       _at_least(params, min_version), session=key)  # fmt: skip

    @staticmethod
    def get_all(key: str, status: str, offset: int, limit: int | None, as_of: AsOf,
                min_version: int | None = None, last: int | None = None,
                ) -> Request[MessagePage]:  # fmt: skip
        """The first page of a history read (`history_pages` reads the others)."""
        params: dict[str, Any] = {"status": status, "offset": offset, **as_of.params()}
        if limit is not None:
            params["limit"] = limit
        if last is not None:
            params["last"] = last
        return Request("GET", session_path(key, "/messages"), MessagePage,
                       _at_least(params, min_version), session=key)  # fmt: skip

    @staticmethod
    def events(key: str, after: int, limit: int) -> Request[AuditTrailAnswer]:
        params = {"after": after, "limit": limit}
        return Request("GET", session_path(key, "/events"), AuditTrailAnswer, params)

    @staticmethod
    def head(key: str, min_version: int | None = None) -> Request[SessionHeadAnswer]:
        return Request("GET", session_path(key), SessionHeadAnswer, _at_least({}, min_version),
                       session=key)  # fmt: skip

    @staticmethod
    def keys(
        prefix: str, cursor: str | None, limit: int, exclude_cleared: bool = False,
        order: str = "key",
    ) -> Request[SessionKeys]:  # fmt: skip
        params: dict[str, Any] = {"prefix": prefix, "limit": limit}
        if exclude_cleared:
            params["exclude_cleared"] = "true"
        if order != "key":
            params["order"] = order
        if cursor is not None:
            params["cursor"] = cursor
        return Request("GET", "/v1/sessions", SessionKeys, params)

    @staticmethod
    def create_key(role: str, name: str) -> Request[CreatedApiKey]:
        return Request("POST", "/v1/keys", CreatedApiKey, json={"role": role, "name": name})

    @staticmethod
    def list_keys() -> Request[ApiKeyList]:
        return Request("GET", "/v1/keys", ApiKeyList)

    @staticmethod
    def revoke_key(key_id: str) -> Request[ApiKey]:
        return Request("DELETE", f"/v1/keys/{quote(key_id, safe='')}", ApiKey)

    @staticmethod
    def status(path: str) -> Request[Status]:
        return Request("GET", path, Status)


def export_request(key: str, format: str, as_of_version: int | None) -> tuple[str, dict[str, Any]]:
    """Path and query of an export (streamed, so it is no `Request`: its body is no model)."""
    params: dict[str, Any] = {"format": format}
    if as_of_version is not None:
        params["as_of_version"] = as_of_version
    return session_path(key, "/export"), params


def client_kwargs(base_url: str, api_key: str | None, timeout: float) -> dict[str, Any]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    return {"base_url": base_url, "headers": headers, "timeout": timeout}


RETRIES = 3  # further attempts of a call whose connection failed or whose store was away
MAX_RETRY_WAIT = 5.0  # seconds: the longest Retry-After the client honours


def retry_wait(attempt: int, response: httpx.Response | None) -> float | None:
    """Seconds to wait before attempt `attempt + 1` of a call (None: do not retry): after a
    connection that failed (`response` None) or a 503, up to RETRIES times."""
    if attempt >= RETRIES:
        return None
    if response is None:
        return 0.2 * (attempt + 1)
    if response.status_code != 503:
        return None
    try:
        return min(float(response.headers.get("Retry-After", "1")), MAX_RETRY_WAIT)
    except ValueError:
        return 1.0
