"""The MCP server (the official `mcp` SDK's `MCPServer`): the ledger's read tools
(read_tools.py) for any client that speaks the Model Context Protocol.

Callers authenticate with the HTTP API's own API keys and roles, in their own tenant:
over streamable HTTP with `Authorization: Bearer <key>` on every request (the SDK's
bearer middleware asks `KeyVerifier`; a wrong key is answered 401 before MCP sees the
request); over stdio with the one key the server was started with, checked again on
every request so that a revoked key stops at its next call (a wrong key is refused with
MCP error `UNAUTHENTICATED` from the handshake on). A role that may not make a read
(search takes an auditor or admin key, as over HTTP) is MCP error `FORBIDDEN`; a read
the ledger refuses (no such session, bad input) is the tool's error result, its message
the ledger's.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Annotated, Any, Literal, TypeVar

import anyio
from mcp.server import ServerRequestContext
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.context import CallNext, HandlerResult
from mcp.server.mcpserver import MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import ToolAnnotations
from pydantic import AnyHttpUrl, Field, ValidatorFunctionWrapHandler, WrapValidator
from pydantic_core import PydanticCustomError

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.ledger import Ledger

from ..auth import Forbidden, Principal
from ..deps import AsOfVersion
from ..keystore import KeyStore
from .read_tools import LedgerReads

UNAUTHENTICATED = -32001  # JSON-RPC server errors of this server: no valid API key
FORBIDDEN = -32003  # the key's role may not make this read
INSTRUCTIONS = (
    "Reads of an audited conversation store: a session's context window, its history a "
    "page at a time, its head, a replay at a past version or moment, its audit trail, "
    "and (auditor and admin keys) a search of the tenant's events."
)
READ_ONLY = ToolAnnotations(read_only_hint=True, idempotent_hint=True, open_world_hint=False)
R = TypeVar("R")


def _null_or(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A null argument as given (the tool's default); any other value validated."""
    return None if value is None else handler(value)


def _not_bool(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
    """A number argument: `true` and `false` refused, as the route refuses `?limit=true`
    (pydantic would read them as 1 and 0)."""
    if isinstance(value, bool):
        raise PydanticCustomError("int_type", "Input should be a valid integer, not a boolean")
    return handler(value)


NOT_BOOL = WrapValidator(_not_bool)
Count = Annotated[int | None, NOT_BOOL]  # a number argument, or null
SessionKey = Annotated[str, Field(description="The session's key, as it was written.")]
TokenLimit = Annotated[
    int | None, NOT_BOOL, Field(description="Most tokens in the window; default: the server's.")
]
InitialTokens = Annotated[
    int | None, NOT_BOOL,
    Field(description="Tokens already spent before the window (default 0)."),
]  # fmt: skip
Version = Annotated[AsOfVersion, NOT_BOOL]


# A string argument, or null. Declared `str`, not `str | None`: the SDK's tool layer
# JSON-decodes a string given for any parameter not declared exactly `str`
# (`FuncMetadata.pre_parse_json`), so a prefix "null" read as no prefix, and "[1]" was
# refused as a list. The route's model (read_tools.py) parses what the string holds.
Text = Annotated[str, WrapValidator(_null_or)]
Moment = Annotated[Text, Field(json_schema_extra={"format": "date-time"})]
Cursor = Annotated[Text, Field(description="`next_cursor` of the page before.")]
Prefix = Annotated[Text, Field(description="Session keys starting so.")]
ReadMoment = Annotated[Moment, Field(
    description="Read the session as it was at this time (ISO 8601; no zone: UTC).")]  # fmt: skip

_caller: ContextVar[Principal | None] = ContextVar("ledger_mcp_caller", default=None)


async def _key_owner(keys: KeyStore, secret: str) -> Principal | None:
    """Who the active key of `secret` is: from the process's cache on the event loop when
    it holds the key (as the HTTP API's `auth.authenticate`), else from a worker thread."""
    record = keys.cached(secret)
    if record is None:
        record = await anyio.to_thread.run_sync(keys.authenticate, secret)
    return None if record is None else Principal(record.id, record.tenant, record.role)


class KeyVerifier:
    """The SDK's `TokenVerifier` on the ledger's API keys: a bearer token is an API key;
    its id, tenant and role travel in the `AccessToken` (the SDK binds an MCP session to
    the key that opened it)."""

    def __init__(self, keys: KeyStore) -> None:
        self.keys = keys

    async def verify_token(self, token: str) -> AccessToken | None:
        who = await _key_owner(self.keys, token)
        if who is None:
            return None
        return AccessToken(token=token, client_id=who.key_id, scopes=[who.role],
                           claims={"tenant": who.tenant, "role": who.role})  # fmt: skip


class Callers:
    """The server middleware that names the caller of each request (`_caller`), or
    refuses it: the stdio server's key (`secret`), looked up again each time, or the
    bearer key the HTTP middleware verified."""

    def __init__(self, keys: KeyStore, secret: str | None) -> None:
        self.keys = keys
        self.secret = secret

    async def __call__(
        self, ctx: ServerRequestContext[Any, Any], call_next: CallNext
    ) -> HandlerResult:
        if ctx.request_id is None:  # a notification: it reads nothing
            return await call_next(ctx)
        token = _caller.set(await self._principal(ctx))
        try:
            return await call_next(ctx)
        finally:
            _caller.reset(token)

    async def _principal(self, ctx: ServerRequestContext[Any, Any]) -> Principal:
        if self.secret is not None:
            who = await _key_owner(self.keys, self.secret)
            if who is None:
                raise MCPError(UNAUTHENTICATED, "the API key is unknown or revoked")
            return who
        scope = getattr(ctx.request, "scope", None) or {}
        user = scope.get("user")
        if not isinstance(user, AuthenticatedUser) or not user.access_token.claims:
            raise MCPError(UNAUTHENTICATED, "send an API key: 'Authorization: Bearer <key>'")
        claims = user.access_token.claims
        return Principal(user.access_token.client_id, claims["tenant"], claims["role"])


async def _as_caller(read: Callable[[Principal], R]) -> R:
    """`read` for the request's caller, in a worker thread (a store read blocks)."""
    who = _caller.get()
    if who is None:
        raise MCPError(UNAUTHENTICATED, "no API key")
    try:
        return await anyio.to_thread.run_sync(read, who)
    except Forbidden as refused:
        raise MCPError(FORBIDDEN, str(refused)) from None
    except LedgerError as refused:  # the model reads why (a crash's text stays here)
        raise ToolError(str(refused)) from None


def build_server(
    ledger: Ledger, keys: KeyStore, *, log_agent_reads: bool, api_key: str | None = None,
    url: str | None = None,
) -> MCPServer:  # fmt: skip
    """The server on `ledger`: for stdio, `api_key` is the caller's key; for streamable
    HTTP (`api_key` None), `url` is where it listens, and every request brings a key."""
    reads = LedgerReads(ledger, log_agent_reads=log_agent_reads)
    http = api_key is None
    # The SDK's resource-server settings; the "issuer" issues no tokens: the keys come
    # from `session-ledger keys create`, so no OAuth route is served.
    issuer = AnyHttpUrl(url or "http://127.0.0.1")
    server: MCPServer = MCPServer(
        "session-ledger", instructions=INSTRUCTIONS,
        token_verifier=KeyVerifier(keys) if http else None,
        auth=AuthSettings(issuer_url=issuer, resource_server_url=None) if http else None,
        middleware=[Callers(keys, api_key)],
    )  # fmt: skip
    for tool in _tools(reads):
        server.add_tool(tool, annotations=READ_ONLY, structured_output=True)
    return server


def _tools(reads: LedgerReads) -> list[Callable[..., Awaitable[dict[str, Any]]]]:
    async def context_window(
        session_key: SessionKey, token_limit: TokenLimit = None,
        initial_token_count: InitialTokens = None, as_of_version: Version = None,
        as_of: ReadMoment = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The session's context window: its newest messages within `token_limit`, oldest
        first, as the agent is given them; with `as_of_version` or `as_of`, the window it
        was given then."""
        return await _as_caller(lambda who: reads.window(
            who, session_key, token_limit=token_limit, initial_token_count=initial_token_count,
            as_of_version=as_of_version, as_of=as_of,
        ))  # fmt: skip

    async def history(
        session_key: SessionKey,
        status: Annotated[Text, Field(
            description="active: the active history (default); archived: the archived "
            "messages.")] = None,
        offset: Annotated[Count, Field(description="Skip this many messages.")] = None,
        limit: Annotated[Count, Field(
            description="Most messages in the page (default and most: the server's "
            "LEDGER_MAX_PAGE_MESSAGES).")] = None,
        cursor: Annotated[Text, Field(
            description="`next_cursor` of the page before: the page after it, of the same "
            "version (not with offset, last, as_of_version or as_of).")] = None,
        last: Annotated[Count, Field(
            description="Start at the last-th newest message: the newest `last` messages, "
            "oldest first (not with offset).")] = None,
        as_of_version: Version = None, as_of: ReadMoment = None,
    ) -> dict[str, Any]:  # fmt: skip
        """A page of the session's history, oldest first; follow `next_cursor` for the
        rest (null: the last page). With `as_of_version` or `as_of`: the history then."""
        return await _as_caller(lambda who: reads.history(
            who, session_key, status=status, offset=offset, limit=limit, cursor=cursor,
            last=last, as_of_version=as_of_version, as_of=as_of,
        ))  # fmt: skip

    async def session_head(session_key: SessionKey) -> dict[str, Any]:
        """The session's head: version, message counts, token total, times, last event."""
        return await _as_caller(lambda who: reads.head(who, session_key))

    async def replay(
        session_key: SessionKey, as_of_version: Version = None, as_of: ReadMoment = None,
        token_limit: TokenLimit = None, initial_token_count: InitialTokens = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The session as it stood at a version or moment (default: now): its head then,
        and the context window the agent was given then, with its token count."""
        return await _as_caller(lambda who: reads.replay(
            who, session_key, as_of_version=as_of_version, as_of=as_of,
            token_limit=token_limit, initial_token_count=initial_token_count,
        ))  # fmt: skip

    async def audit_trail(
        session_key: SessionKey,
        after: Annotated[Count, Field(description="Events after this version.")] = None,
        limit: Annotated[Count, Field(description="Most events (default 100).")] = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The session's audit trail, oldest first: each change with its actor, reason,
        time and what it did; pass `next_after` as `after` for more."""
        return await _as_caller(lambda who: reads.audit(who, session_key, after=after,
                                                        limit=limit))  # fmt: skip

    async def search_audit(
        actor: Annotated[Text, Field(description="The events of this actor (key:<id>).")] = None,
        event_type: Annotated[Text, Field(
            description="The events of this type, e.g. HistoryCleared.")] = None,
        start: Annotated[Moment, Field(description="Recorded at or after.")] = None,
        end: Annotated[Moment, Field(description="Recorded before.")] = None,
        prefix: Prefix = None,
        cursor: Cursor = None,
        limit: Annotated[Count, Field(description="Most events (default 100).")] = None,
    ) -> dict[str, Any]:  # fmt: skip
        """Events across the tenant's sessions, oldest first, by actor or type (or both),
        in a time range (auditor and admin keys)."""
        return await _as_caller(lambda who: reads.search(
            who, actor=actor, type=event_type, **{"from": start, "to": end}, prefix=prefix,
            cursor=cursor, limit=limit,
        ))  # fmt: skip

    async def list_sessions(
        prefix: Prefix = None,
        cursor: Cursor = None,
        limit: Annotated[Count, Field(description="Most keys (default 100).")] = None,
    ) -> dict[str, Any]:  # fmt: skip
        """The tenant's session keys, sorted, a page at a time."""
        return await _as_caller(lambda who: reads.sessions(who, prefix=prefix, cursor=cursor,
                                                           limit=limit))  # fmt: skip

    return [context_window, history, session_head, replay, audit_trail, search_audit,
            list_sessions]  # fmt: skip


def run(server: MCPServer, transport: Literal["stdio", "http"], host: str, port: int) -> None:
    """Serve until the client leaves (stdio) or the process is stopped (HTTP, at `/mcp`)."""
    if transport == "stdio":
        server.run("stdio")
    else:
        server.run("streamable-http", host=host, port=port)
