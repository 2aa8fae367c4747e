"""Who is calling: `Authorization: Bearer <key>` -> a Principal (tenant, role).

Roles: `agent` reads and writes its tenant's sessions; `auditor` only reads them (and
exports them for compliance); `admin` does all that and manages its tenant's API keys.
There is no anonymous access to sessions or keys. The secrets themselves live hashed
in the KeyStore (keystore.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from fastapi import Request
from fastapi.concurrency import run_in_threadpool
from fastapi.security import HTTPBearer

from .keystore import KeyRecord, KeyStore

READ, WRITE, MANAGE_KEYS = "read sessions", "write sessions", "manage API keys"
EXPORT = "export sessions"  # a whole verifiable transcript: for compliance, not for agents
PERMISSIONS: dict[str, frozenset[str]] = {
    "agent": frozenset({READ, WRITE}),
    "auditor": frozenset({READ, EXPORT}),
    "admin": frozenset({READ, WRITE, EXPORT, MANAGE_KEYS}),
}

bearer = HTTPBearer(auto_error=False, description="An API key: `Authorization: Bearer <key>`.")


class Unauthenticated(Exception):
    """No API key, or one that is unknown or revoked (HTTP 401)."""


class Forbidden(Exception):
    """The key's role may not do this (HTTP 403)."""


@dataclass(frozen=True)
class Principal:
    """The caller: which key, which tenant, which role."""

    key_id: str
    tenant: str
    role: str

    @property
    def actor(self) -> str:
        """How the ledger's events name this caller."""
        return f"key:{self.key_id}"


async def key_store(request: Request) -> KeyStore:
    store: KeyStore = request.app.state.key_store
    return store


async def authenticate(request: Request) -> Principal:
    """The caller's principal; Unauthenticated unless a valid, active key was given.

    A request is authenticated once, by `admission.enforce_limits` before its route: the
    principal is kept in `request.state` for every later dependency that asks (the role
    check, the access-log mark). A key the process holds answers on the event loop; only
    a lookup in the store goes to a worker thread (it may wait for a connection). Keys
    that fail are limited per client address (`_looked_up`)."""
    known: Principal | None = getattr(request.state, "principal", None)
    if known is not None:
        return known
    credentials = await bearer(request)
    if credentials is None or credentials.scheme.lower() != "bearer":
        raise Unauthenticated("send an API key: 'Authorization: Bearer <key>'")
    if len(request.headers.getlist("authorization")) > 1:  # (which one is meant?)
        raise Unauthenticated("send one Authorization header, not several")
    store: KeyStore = request.app.state.key_store
    record = store.cached(credentials.credentials)
    if record is None:
        record = await _looked_up(request, store, credentials.credentials)
    principal = request.state.principal = Principal(record.id, record.tenant, record.role)
    return principal


class FailureLimits(Protocol):
    """The limit of failed authentications per client address (ratelimit.py's Limiter)."""

    def refuse_known_failures(self, address: str) -> None: ...

    def admit_failure_in_memory(self, address: str) -> bool: ...

    def admit_failure(self, address: str) -> None: ...


async def _looked_up(request: Request, store: KeyStore, secret: str) -> KeyRecord:
    """The active key of `secret` from the store, within the client address's limit of
    failed authentications: an address over it is refused (429) before its key is looked
    up, and a failure beyond it answers 429, not 401."""
    limiter: FailureLimits = request.app.state.limiter
    address = request.client.host if request.client is not None else "unknown"
    limiter.refuse_known_failures(address)
    record = await run_in_threadpool(store.authenticate, secret)
    if record is None:
        if not limiter.admit_failure_in_memory(address):
            await run_in_threadpool(limiter.admit_failure, address)
        raise Unauthenticated("the API key is unknown or revoked")
    return record


def require(permission: str) -> Callable[[Request], Awaitable[Principal]]:
    """A dependency that lets through only callers whose role has `permission`. It has
    no dependencies of its own (FastAPI would solve them again for every route parameter
    that uses it): the caller comes from `authenticate`, which the routers run first."""

    async def check(request: Request) -> Principal:
        principal = await authenticate(request)
        route = request.scope.get("route")
        check_role(principal, permission, f"{request.method} {getattr(route, 'path', '')}")
        return principal

    return check


def check_role(who: Principal, permission: str, what: str) -> None:
    """Forbidden unless `who`'s role has `permission`; the refusal names what was asked
    (`what`: a route, a tool) and the roles that may."""
    if permission not in PERMISSIONS.get(who.role, frozenset()):
        roles = " or ".join(role for role, granted in PERMISSIONS.items() if permission in granted)
        raise Forbidden(f"role {who.role!r} may not {what}: it takes a key of role {roles}")
