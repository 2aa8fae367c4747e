"""Sessions: the list of a tenant's session keys, and one session's head (version,
counts, times)."""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Depends, Response
from pydantic import Field

from ..access_logging import AccessLoggedRoute, logged_query
from ..auth import READ
from ..deps import TEXT_PATTERN, LedgerDep, ReaderDep, ReadOptionsDep, SessionCall, on_session
from ..http_errors import ERROR_RESPONSES
from ..route_inputs import RouteInputs
from ..schemas import SessionHeadAnswer, SessionKeys
from ..session_responses import etag, not_modified

router = APIRouter(
    prefix="/v1/sessions", tags=["sessions"], responses=ERROR_RESPONSES,
    route_class=AccessLoggedRoute,
)  # fmt: skip


@router.get("/{key}", response_model=SessionHeadAnswer)
def get_session(
    call: Annotated[SessionCall, Depends(on_session(READ, "head"))], response: Response,
    read_options: ReadOptionsDep,
) -> SessionHeadAnswer | Response:  # fmt: skip
    """The session's version, message counts, token total and times."""
    key, who, ledger = call
    head = ledger.head(key, tenant=who.tenant, min_version=read_options.min_version)
    if head.version in read_options.held:
        return not_modified(head.version)
    etag(response, head.version)
    return SessionHeadAnswer(
        key=head.key, version=head.version, message_count=head.message_count,
        archived_count=head.archived_count, token_total=head.token_total,
        created_at=head.created_at, updated_at=head.updated_at, last_event=head.last_event,
    )  # fmt: skip


class SessionListInputs(RouteInputs):
    prefix: str = Field("", max_length=512, pattern=TEXT_PATTERN)
    cursor: str | None = Field(None, max_length=512, pattern=TEXT_PATTERN,
                               description="`next_cursor` of the previous page.")  # fmt: skip
    limit: int = Field(100, ge=1, le=1000)
    exclude_cleared: bool = Field(False, description="Leave out sessions whose last change "
                                  "was a reset or an erasure.")  # fmt: skip
    order: Literal["key", "created"] = Field(
        "key", description="`key`: sorted by key; `created`: in the order the sessions were "
        "made (their first write), as LlamaIndex's SimpleChatStore lists its keys. Either "
        "way the cursor is the last key of the page before."
    )  # fmt: skip


@router.get("", response_model=SessionKeys, dependencies=[Depends(logged_query("sessions"))])
def list_sessions(
    ledger: LedgerDep, who: ReaderDep,
    inputs: Annotated[SessionListInputs, Depends(SessionListInputs.parse)],
) -> SessionKeys:  # fmt: skip
    """The caller's tenant's session keys, sorted by key (or in the order they were
    made), one page at a time."""
    limit = inputs.limit
    found = ledger.keys(tenant=who.tenant, prefix=inputs.prefix, after=inputs.cursor,
                        limit=limit + 1, exclude_cleared=inputs.exclude_cleared,
                        order=inputs.order)  # fmt: skip
    page = found[:limit]
    return SessionKeys(keys=page, next_cursor=page[-1] if len(found) > limit else None)
