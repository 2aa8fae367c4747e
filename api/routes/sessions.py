"""Session routes: the chat-memory calls (put, set, reset, delete, get, get_all, keys).

Every answer about one session carries `ETag: "<version>"`; a write sent with
`If-Match: "<version>"` happens only if the session is still at that version.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query, Response
from session_ledger.domain import ports
from session_ledger.domain.errors import SessionNotFound

from ..deps import (
    TEXT_PATTERN,
    LedgerDep,
    ReaderDep,
    SessionKeyDep,
    WriteOptions,
    WriteOptionsDep,
    WriterDep,
)
from ..errors import ERROR_RESPONSES, PreconditionFailed
from ..schemas import AppendIn, MessageList, MessagesIn, SessionHead, SessionKeys, WriteResult

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES)
BIG = 2**62  # larger numbers are no real position and would overflow the SQL column types


def _etag(response: Response, version: int) -> None:
    response.headers["ETag"] = f'"{version}"'


def _written(response: Response, result: ports.WriteResult) -> WriteResult:
    _etag(response, result.version)
    if result.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return WriteResult(
        version=result.version, message_count=result.message_count, replayed=result.replayed,
        removed=[m.to_dict() for m in result.removed],  # type: ignore[misc]
    )  # fmt: skip


def _precondition(ledger: LedgerDep, key: str, tenant: str, options: WriteOptions) -> None:
    if options.must_exist:
        try:
            ledger.head(key, tenant=tenant)
        except SessionNotFound:
            raise PreconditionFailed(f"If-Match: * but session {key!r} does not exist") from None


@router.post("/{key}/messages", response_model=WriteResult)
def append_messages(
    key: SessionKeyDep, body: AppendIn, ledger: LedgerDep, who: WriterDep,
    options: WriteOptionsDep, response: Response,
) -> WriteResult:  # fmt: skip
    """Append messages to the session (put / put_messages), all or none; creates it."""
    _precondition(ledger, key, who.tenant, options)
    messages = [m.to_ledger() for m in body.messages]
    return _written(response, ledger.put_messages(key, messages, **options.ledger_kwargs(who)))


@router.put("/{key}/messages", response_model=WriteResult)
def replace_history(
    key: SessionKeyDep, body: MessagesIn, ledger: LedgerDep, who: WriterDep,
    options: WriteOptionsDep, response: Response,
) -> WriteResult:  # fmt: skip
    """Replace the session's whole history (set); the old one stays in the audit trail."""
    _precondition(ledger, key, who.tenant, options)
    messages = [m.to_ledger() for m in body.messages]
    return _written(response, ledger.set(key, messages, **options.ledger_kwargs(who)))


@router.delete("/{key}/messages", response_model=WriteResult)
def clear_history(
    key: SessionKeyDep, ledger: LedgerDep, who: WriterDep, options: WriteOptionsDep,
    response: Response,
) -> WriteResult:  # fmt: skip
    """Clear the session's history (reset)."""
    _precondition(ledger, key, who.tenant, options)
    return _written(response, ledger.reset(key, **options.ledger_kwargs(who)))


@router.delete("/{key}/messages/last", response_model=WriteResult)
def delete_last_message(
    key: SessionKeyDep, ledger: LedgerDep, who: WriterDep, options: WriteOptionsDep,
    response: Response,
) -> WriteResult:  # fmt: skip
    """Remove the newest message; `removed` holds it."""
    _precondition(ledger, key, who.tenant, options)
    return _written(response, ledger.delete_last_message(key, **options.ledger_kwargs(who)))


@router.delete("/{key}/messages/{index}", response_model=WriteResult)
def delete_message(
    key: SessionKeyDep, index: Annotated[int, Path(ge=-BIG, le=BIG)], ledger: LedgerDep,
    who: WriterDep, options: WriteOptionsDep, response: Response,
) -> WriteResult:  # fmt: skip
    """Remove the message at `index` (negative counts from the end); `removed` holds it."""
    _precondition(ledger, key, who.tenant, options)
    kwargs = options.ledger_kwargs(who)
    return _written(response, ledger.delete_message(key, index, **kwargs))


@router.get("/{key}/messages", response_model=MessageList)
def get_history(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep, response: Response,
    status: Literal["active", "archived"] = "active",
    offset: Annotated[int, Query(ge=0, le=BIG)] = 0,
    limit: Annotated[int | None, Query(ge=0, le=BIG)] = None,
) -> MessageList:  # fmt: skip
    """The session's whole history, oldest first, or a page of it (get_all)."""
    _etag(response, ledger.head(key, tenant=who.tenant).version)
    found = ledger.get_all(key, tenant=who.tenant, status=status, offset=offset, limit=limit)
    return MessageList(messages=[m.to_dict() for m in found])  # type: ignore[misc]


@router.get("/{key}/context", response_model=MessageList)
def get_context(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep, response: Response,
    token_limit: Annotated[int | None, Query(ge=1, le=BIG, description="Default: "
                                             "the server's LEDGER_TOKEN_LIMIT.")] = None,
    initial_token_count: Annotated[int, Query(ge=0, le=BIG)] = 0,
) -> MessageList:  # fmt: skip
    """The context window: the newest messages within `token_limit` (ChatMemoryBuffer.get)."""
    _etag(response, ledger.head(key, tenant=who.tenant).version)
    found = ledger.get(
        key, tenant=who.tenant, token_limit=token_limit, initial_token_count=initial_token_count
    )
    return MessageList(messages=[m.to_dict() for m in found])  # type: ignore[misc]


@router.get("/{key}", response_model=SessionHead)
def get_session(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep, response: Response
) -> SessionHead:
    """The session's version, message counts, token total and times."""
    head = ledger.head(key, tenant=who.tenant)
    _etag(response, head.version)
    return SessionHead(
        key=head.key, version=head.version, message_count=head.message_count,
        archived_count=head.archived_count, token_total=head.token_total,
        created_at=head.created_at, updated_at=head.updated_at,
    )  # fmt: skip


@router.get("", response_model=SessionKeys)
def list_sessions(
    ledger: LedgerDep, who: ReaderDep,
    prefix: Annotated[str, Query(max_length=512, pattern=TEXT_PATTERN)] = "",
    cursor: Annotated[str | None, Query(max_length=512, pattern=TEXT_PATTERN,
                                        description="`next_cursor` of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> SessionKeys:  # fmt: skip
    """The caller's tenant's session keys, sorted, one page at a time."""
    found = ledger.keys(tenant=who.tenant, prefix=prefix, after=cursor, limit=limit + 1)
    page = found[:limit]
    return SessionKeys(keys=page, next_cursor=page[-1] if len(found) > limit else None)
