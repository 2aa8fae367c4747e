"""The MCP server's read tools as plain calls: a caller (`Principal`) and the tool's
arguments in, a JSON-ready answer out, with no MCP in sight (server.py exposes them).

Each read takes its inputs through the HTTP route's own model (`WindowInputs`,
`HistoryInputs`, ...), so a tool accepts and refuses exactly what the route does (the
same page limits, the same cursors); checks the caller's role as the route does; and is
written to the access log as the route's read is (`deps.mark_access`'s rule: every read
of an auditor or admin key, an agent's only with LEDGER_LOG_AGENT_READS), under the
route's action name, with the inputs the caller gave (by the route's names) and
`"via": "mcp"`, and the number of records the answer holds (`access_logging.records_in`).
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel, ValidationError

from session_ledger.domain.errors import InvalidInput, SessionNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import MessagesRead

from ..access_logging import records_in
from ..auth import EXPORT, READ, Principal, check_role
from ..deps import ALWAYS_LOGGED_ROLES, WindowInputs
from ..route_inputs import RouteInputs
from ..routes.events import AuditInputs, audit_page
from ..routes.message_routes import HistoryInputs
from ..routes.replay import replayed
from ..routes.search import FoundEventOut, SearchInputs
from ..routes.sessions import SessionListInputs
from ..schemas import SessionHeadAnswer
from ..session_responses import page_cursor

VIA = "mcp"  # the access log's `via` parameter of a read made through this server


def inputs_of(model: type[RouteInputs], given: dict[str, Any]) -> RouteInputs:
    """`given` (the arguments the caller set, by the route's names) validated by the
    route's model; what it refuses is `InvalidInput` with the model's reasons."""
    try:
        return model.model_validate({k: v for k, v in given.items() if v is not None})
    except ValidationError as error:
        reasons = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'input'}: {e['msg']}" for e in error.errors()
        )
        raise InvalidInput(reasons) from None


class LedgerReads:
    """The read tools on one ledger. `log_agent_reads`: the server's
    LEDGER_LOG_AGENT_READS (an agent's reads are logged only with it, as over HTTP)."""

    def __init__(self, ledger: Ledger, *, log_agent_reads: bool) -> None:
        self.ledger = ledger
        self.log_agent_reads = log_agent_reads

    def window(self, who: Principal, key: str, **given: Any) -> dict[str, Any]:
        """The context window (GET /v1/sessions/{key}/context)."""
        inputs = self._allowed(who, READ, WindowInputs, given, "read the context window")
        assert isinstance(inputs, WindowInputs)
        read = self.ledger.window(
            key, tenant=who.tenant, token_limit=inputs.token_limit,
            initial_token_count=inputs.initial_token_count,
            as_of_version=inputs.as_of_version, as_of=inputs.as_of,
        )  # fmt: skip
        answer = {"key": key, **_messages(read, who.tenant, key)}
        return self._logged(who, "window", key, inputs, answer)

    def history(self, who: Principal, key: str, **given: Any) -> dict[str, Any]:
        """A page of the history (GET /v1/sessions/{key}/messages)."""
        inputs = self._allowed(who, READ, HistoryInputs, given, "read the history")
        assert isinstance(inputs, HistoryInputs)
        as_of_version, after = inputs.position()
        read = self.ledger.page(
            key, tenant=who.tenant, status=inputs.status, offset=inputs.offset,
            limit=inputs.limit, after=after, as_of_version=as_of_version, as_of=inputs.as_of,
            last=inputs.last,
        )  # fmt: skip
        following = None if read.next_after is None else page_cursor(read)
        answer = {"key": key, **_messages(read, who.tenant, key), "next_cursor": following}
        return self._logged(who, "transcript", key, inputs, answer)

    def head(self, who: Principal, key: str) -> dict[str, Any]:
        """The session's head (GET /v1/sessions/{key})."""
        inputs = self._allowed(who, READ, RouteInputs, {}, "read a session head")
        head = self.ledger.head(key, tenant=who.tenant)
        answer = SessionHeadAnswer(
            key=head.key, version=head.version, message_count=head.message_count,
            archived_count=head.archived_count, token_total=head.token_total,
            created_at=head.created_at, updated_at=head.updated_at, last_event=head.last_event,
        )  # fmt: skip
        return self._logged(who, "head", key, inputs, _json(answer))

    def replay(self, who: Principal, key: str, **given: Any) -> dict[str, Any]:
        """The session at a version or moment (GET /v1/sessions/{key}/replay)."""
        inputs = self._allowed(who, READ, WindowInputs, given, "replay a session")
        assert isinstance(inputs, WindowInputs)
        answer = _json(replayed(self.ledger, key, who.tenant, inputs))
        return self._logged(who, "replay", key, inputs, answer)

    def audit(self, who: Principal, key: str, **given: Any) -> dict[str, Any]:
        """A page of the session's audit trail (GET /v1/sessions/{key}/events)."""
        inputs = self._allowed(who, READ, AuditInputs, given, "read the audit trail")
        assert isinstance(inputs, AuditInputs)
        # A page as the route's: ending before the answer bytes (routes.events.audit_page)
        found, following = audit_page(self.ledger, key, who.tenant, inputs.after, inputs.limit)
        answer = {"key": key, "events": [json.loads(e) for e in found], "next_after": following}
        return self._logged(who, "audit", key, inputs, answer)

    def search(self, who: Principal, **given: Any) -> dict[str, Any]:
        """Events across the tenant by actor or type (GET /v1/events: auditors, admins)."""
        inputs = self._allowed(who, EXPORT, SearchInputs, given, "search the events")
        assert isinstance(inputs, SearchInputs)
        found, following = self.ledger.views.evidence.search_events(
            who.tenant, actor=inputs.actor, event_type=inputs.type, start=inputs.start,
            end=inputs.end, prefix=inputs.prefix, cursor=inputs.cursor, limit=inputs.limit,
        )  # fmt: skip
        answer = {"events": [_json(FoundEventOut(**vars(e))) for e in found],
                  "next_cursor": following}  # fmt: skip
        return self._logged(who, "search", None, inputs, answer)

    def sessions(self, who: Principal, **given: Any) -> dict[str, Any]:
        """A page of the tenant's session keys (GET /v1/sessions)."""
        inputs = self._allowed(who, READ, SessionListInputs, given, "list the sessions")
        assert isinstance(inputs, SessionListInputs)
        found = self.ledger.keys(
            tenant=who.tenant, prefix=inputs.prefix, after=inputs.cursor,
            limit=inputs.limit + 1, exclude_cleared=inputs.exclude_cleared, order=inputs.order,
        )  # fmt: skip
        page = found[: inputs.limit]
        answer = {"keys": page, "next_cursor": page[-1] if len(found) > inputs.limit else None}
        return self._logged(who, "sessions", None, inputs, answer)

    def _allowed(
        self, who: Principal, permission: str, model: type[RouteInputs], given: dict[str, Any],
        what: str,
    ) -> RouteInputs:  # fmt: skip
        check_role(who, permission, what)
        return inputs_of(model, given)

    def _logged(
        self, who: Principal, action: str, key: str | None, inputs: BaseModel,
        answer: dict[str, Any],
    ) -> dict[str, Any]:  # fmt: skip
        """`answer`, once its read is in the access log (when it is to be logged)."""
        if who.role in ALWAYS_LOGGED_ROLES or self.log_agent_reads:
            given = inputs.model_dump(mode="json", by_alias=True, exclude_unset=True)
            self.ledger.views.evidence.record_access(
                who.tenant, who.actor, who.role, action, key, {**given, "via": VIA},
                records_in(answer),
            )  # fmt: skip
        return answer


def _messages(read: MessagesRead, tenant: str, key: str) -> dict[str, Any]:
    """A read's version and messages (their stored canonical JSON, decoded); a session
    that does not exist is `SessionNotFound`, as over HTTP."""
    if read.version == 0:
        raise SessionNotFound(tenant, key)
    return {"version": read.version, "messages": read.dicts()}


def _json(model: BaseModel) -> dict[str, Any]:
    answer: dict[str, Any] = model.model_dump(mode="json")
    return answer
