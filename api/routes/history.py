"""Session reads: history, context window, head, key list, and the past (as_of reads,
the audit trail). Every answer about one session carries the session's current version
as `ETag: "<version>"`, the value a conditional write sends back in If-Match.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Query, Response

from ..deps import TEXT_PATTERN, AsOf, LedgerDep, ReaderDep, SessionKeyDep
from ..errors import ERROR_RESPONSES
from ..schemas import AuditEvent, AuditTrail, MessageList, SessionHead, SessionKeys

router = APIRouter(prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES)
BIG = 2**62  # larger numbers are no real position and would overflow the SQL column types
AsOfVersion = Annotated[
    int | None,
    Query(ge=1, le=BIG, description="Read the session as it was at this version (replay)."),
]


def etag(response: Response, version: int) -> None:
    response.headers["ETag"] = f'"{version}"'


def message_list(texts: list[str], version: int) -> Response:
    """A `MessageList` body made of the messages' stored canonical JSON, as it is: decoding
    each message, validating it and encoding it again cost about 1 ms per 60 messages."""
    response = Response(
        ('{"messages":[' + ",".join(texts) + "]}").encode(), media_type="application/json"
    )
    etag(response, version)
    return response


@router.get("/{key}/events", response_model=AuditTrail)
def get_audit_trail(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep, response: Response,
    after: Annotated[int, Query(ge=0, le=BIG, description="Events after this version.")] = 0,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
) -> AuditTrail:  # fmt: skip
    """The session's audit trail: its events, oldest first, with actor, reason and changes."""
    etag(response, ledger.head(key, tenant=who.tenant).version)
    entries = ledger.audit(key, tenant=who.tenant, after_version=after, limit=limit)
    events = [AuditEvent(**vars(e)) for e in entries]
    return AuditTrail(
        events=events, next_after=events[-1].version if len(events) == limit else None
    )


@router.get("/{key}/messages", response_model=MessageList)
def get_history(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep,
    status: Literal["active", "archived"] = "active",
    offset: Annotated[int, Query(ge=0, le=BIG)] = 0,
    limit: Annotated[int | None, Query(ge=0, le=BIG)] = None,
    as_of_version: AsOfVersion = None, as_of: AsOf = None,
) -> Response:  # fmt: skip
    """The session's whole history, oldest first, or a page of it (get_all); with
    `as_of_version` or `as_of`, the history as it stood then (replay)."""
    version = ledger.head(key, tenant=who.tenant).version
    found = ledger.get_all_json(key, tenant=who.tenant, status=status, offset=offset,
                                limit=limit, as_of_version=as_of_version, as_of=as_of)  # fmt: skip
    return message_list(found, version)


@router.get("/{key}/context", response_model=MessageList)
def get_context(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep,
    token_limit: Annotated[int | None, Query(ge=1, le=BIG, description="Default: "
                                             "the server's LEDGER_TOKEN_LIMIT.")] = None,
    initial_token_count: Annotated[int, Query(ge=0, le=BIG)] = 0,
    as_of_version: AsOfVersion = None, as_of: AsOf = None,
) -> Response:  # fmt: skip
    """The context window: the newest messages within `token_limit` (ChatMemoryBuffer.get);
    with `as_of_version` or `as_of`, the window the agent was given then."""
    version = ledger.head(key, tenant=who.tenant).version
    found = ledger.get_json(
        key, tenant=who.tenant, token_limit=token_limit, initial_token_count=initial_token_count,
        as_of_version=as_of_version, as_of=as_of,
    )  # fmt: skip
    return message_list(found, version)


@router.get("/{key}", response_model=SessionHead)
def get_session(
    key: SessionKeyDep, ledger: LedgerDep, who: ReaderDep, response: Response
) -> SessionHead:
    """The session's version, message counts, token total and times."""
    head = ledger.head(key, tenant=who.tenant)
    etag(response, head.version)
    return SessionHead(
        key=head.key, version=head.version, message_count=head.message_count,
        archived_count=head.archived_count, token_total=head.token_total,
        created_at=head.created_at, updated_at=head.updated_at, last_event=head.last_event,
    )  # fmt: skip


@router.get("", response_model=SessionKeys)
def list_sessions(
    ledger: LedgerDep, who: ReaderDep,
    prefix: Annotated[str, Query(max_length=512, pattern=TEXT_PATTERN)] = "",
    cursor: Annotated[str | None, Query(max_length=512, pattern=TEXT_PATTERN,
                                        description="`next_cursor` of the previous page.")] = None,
    limit: Annotated[int, Query(ge=1, le=1000)] = 100,
    exclude_cleared: Annotated[bool, Query(description="Leave out sessions whose last "
                                           "change was a reset.")] = False,
) -> SessionKeys:  # fmt: skip
    """The caller's tenant's session keys, sorted, one page at a time."""
    found = ledger.keys(tenant=who.tenant, prefix=prefix, after=cursor, limit=limit + 1,
                        exclude_cleared=exclude_cleared)  # fmt: skip
    page = found[:limit]
    return SessionKeys(keys=page, next_cursor=page[-1] if len(found) > limit else None)
