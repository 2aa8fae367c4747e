"""The dependency that holds every authenticated request to its key's and tenant's limits.

`app.py` puts it on every router but health's: `/healthz`, `/readyz` and `/metrics` are
never limited. It runs after authentication (the principal names the key and tenant)
and before the route reads its inputs, so a refused request stores nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Annotated
from urllib.parse import unquote_to_bytes

from fastapi import Depends, Request
from starlette.concurrency import run_in_threadpool

from .auth import Principal, authenticate
from .ratelimit import Limiter
from .ratelimit_budget import Refused

READS = frozenset({"GET", "HEAD", "OPTIONS"})
# The routes whose write creates a session that does not exist yet.
CREATING = frozenset({("POST", "/v1/sessions/{key}/messages"),
                      ("PUT", "/v1/sessions/{key}/messages")})  # fmt: skip


async def enforce_limits(
    request: Request, principal: Annotated[Principal, Depends(authenticate)]
) -> AsyncIterator[None]:
    """Charge the request to its key and tenant (429 when over a limit); a write that
    creates a session is counted against the tenant's sessions quota, and given back if
    the write fails."""
    limiter: Limiter = request.app.state.limiter
    ledger = request.app.state.ledger
    size = 0 if request.method in READS else len(await request.body())
    key = _created_session(request)

    def admit(admitted: bool) -> bool:  # one hand-off to a worker thread for both
        if not admitted:
            limiter.admit(principal, size)
        return key is not None and limiter.count_session(ledger, principal.tenant, key)

    try:
        # Most requests are admitted (or refused) from memory, in the event loop.
        admitted = limiter.admit_in_memory(principal, size)
        asks = not admitted or limiter.counts_session(principal.tenant, key)
        counted = await run_in_threadpool(admit, admitted) if asks else False
    except Refused as refusal:
        request.app.state.metrics.refusals.labels(refusal.code, refusal.limit).inc()
        raise
    try:
        yield
    except Exception:
        if counted:
            await run_in_threadpool(limiter.uncount_session, principal.tenant)
        raise
    if key is not None:
        limiter.session_exists(principal.tenant, key)


def _created_session(request: Request) -> str | None:
    """The session key of a write that may create its session; None for other requests
    and for keys the route will refuse anyway."""
    route = getattr(request.scope.get("route"), "path", None)
    if (request.method, route) not in CREATING:
        return None
    try:
        return unquote_to_bytes(request.path_params["key"]).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None
