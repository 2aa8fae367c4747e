"""Session writes: the chat-memory mutations (put, set, reset, delete, archive).

Every write answers with `ETag: "<version>"`; a write sent with `If-Match: "<version>"`
happens only if the session is still at that version (else 412, nothing written).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Path, Response

from session_ledger.domain import ports
from session_ledger.domain.errors import SessionNotFound

from ..deps import LedgerDep, SessionKeyDep, WriteOptions, WriteOptionsDep, WriterDep
from ..errors import ERROR_RESPONSES, PreconditionFailed
from ..schemas import AppendIn, ArchiveIn, MessagesIn, WriteResult
from .history import BIG, etag

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES)


def _written(response: Response, result: ports.WriteResult) -> WriteResult:
    etag(response, result.version)
    if result.replayed:
        response.headers["Idempotent-Replayed"] = "true"
    return WriteResult(
        version=result.version, message_count=result.message_count, replayed=result.replayed,
        removed=[m.to_dict() for m in result.removed],
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


@router.post("/{key}/archive", response_model=WriteResult)
def archive_oldest(
    key: SessionKeyDep, body: ArchiveIn, ledger: LedgerDep, who: WriterDep,
    options: WriteOptionsDep, response: Response,
) -> WriteResult:  # fmt: skip
    """Move the `count` oldest active messages to the archive (read them with status=archived)."""
    _precondition(ledger, key, who.tenant, options)
    kwargs = options.ledger_kwargs(who)
    return _written(response, ledger.archive_oldest(key, body.count, **kwargs))
