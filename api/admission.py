"""The dependencies that hold every authenticated request to its key's and tenant's limits.

`app.py` puts `enforce_limits` on every router but health's: `/healthz`, `/readyz` and
`/metrics` are never limited. It authenticates the request (the principal names the key
and tenant) and runs before the route reads its inputs, so a refused request stores
nothing. The two writes that may create their session add `count_new_session`, which
counts it against the tenant's sessions quota and gives it back if the write fails.

Both are plain dependencies of the request alone: FastAPI solves every dependency node
and parameter anew on each request (about 10 µs a node, 30 µs more for a generator), and
every request passes here.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from urllib.parse import unquote_to_bytes

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from .auth import authenticate
from .ratelimit import Limiter
from .ratelimit_budget import Refused

READS = frozenset({"GET", "HEAD", "OPTIONS"})


async def enforce_limits(request: Request) -> None:
    """Authenticate the request and charge it to its key and tenant (429 when over a
    limit); most requests are admitted, or refused, from memory in the event loop."""
    principal = await authenticate(request)
    limiter: Limiter = request.app.state.limiter
    size = 0 if request.method in READS else len(await request.body())
    try:
        if not limiter.admit_in_memory(principal, size):
            await run_in_threadpool(limiter.admit, principal, size)
    except Refused as refusal:
        request.app.state.metrics.refusals.labels(refusal.code, refusal.limit).inc()
        raise


async def count_new_session(request: Request) -> AsyncIterator[None]:
    """Count the session a write would create against its tenant's sessions quota (429
    when full), give it back if the write fails, and remember it exists if it succeeds."""
    principal = await authenticate(request)
    limiter: Limiter = request.app.state.limiter
    key = _session_key(request)
    counted = False
    if key is not None and limiter.counts_session(principal.tenant, key):
        try:
            counted = await run_in_threadpool(
                limiter.count_session, request.app.state.ledger, principal.tenant, key
            )
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


def _session_key(request: Request) -> str | None:
    """The decoded session key; None for a key the route will refuse anyway."""
    try:
        return unquote_to_bytes(request.path_params["key"]).decode("utf-8")
    except (KeyError, UnicodeDecodeError):
        return None
