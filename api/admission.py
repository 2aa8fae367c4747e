"""How every authenticated request is held to its key's and tenant's limits.

`app.py` puts `enforce_limits` on every router but health's: `/healthz`, `/readyz` and
`/metrics` are never limited. It authenticates the request (the principal names the key
and tenant) and runs before the route reads its inputs, so a refused request stores
nothing. It is a plain dependency of the request alone: FastAPI solves every dependency
node and parameter anew on each request (about 10 µs a node, 30 µs more for a
generator), and every request passes here.

But FastAPI reads and decodes a route's JSON body before it solves the route's
dependencies: a request with a body is authenticated earlier, by `authenticate_first`,
when its route first reads the body (middleware.AuthenticatedBodies), so a caller
without a valid key never has its body read, nor decoded (40 MB of `[{},{},...]` took
17 s of CPU and 1 GB before its 401). `enforce_limits` then finds the principal
already known.

The writes that may create their session (append, set, opening a stream) run inside
`new_session_counted`, which counts it against the tenant's sessions quota and gives it
back if the write fails.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from fastapi import Request
from starlette.concurrency import run_in_threadpool

from session_ledger.projections.async_bridge import off_loop

from .auth import Principal, authenticate
from .ratelimit import Limiter
from .ratelimit_budget import Refused

READS = frozenset({"GET", "HEAD", "OPTIONS"})


async def enforce_limits(request: Request) -> None:
    """Authenticate the request and charge it to its key and tenant (429 when over a
    limit, or when its client address is over its failed authentications' limit); most
    requests are admitted, or refused, from memory in the event loop."""
    limiter: Limiter = request.app.state.limiter
    try:
        principal = await authenticate(request)
        size = 0 if request.method in READS else len(await request.body())
        if not limiter.admit_in_memory(principal, size):
            await run_in_threadpool(limiter.admit, principal, size)
    except Refused as refusal:
        request.app.state.metrics.refusals.labels(refusal.code, refusal.limit).inc()
        raise


async def authenticate_first(request: Request) -> Principal:
    """`authenticate`, before the request's body is read; a refusal (its client address
    over its failed authentications' limit) counted as `enforce_limits` counts it."""
    try:
        return await authenticate(request)
    except Refused as refusal:
        request.app.state.metrics.refusals.labels(refusal.code, refusal.limit).inc()
        raise


@contextmanager
def new_session_counted(request: Request, tenant: str, key: str) -> Iterator[None]:
    """Around a write that may create session `key`: count it against its tenant's
    sessions quota first (429 when full), give it back if the write fails, and remember
    that it exists if it succeeds. Runs where the write runs (`deps.short_write`), so a
    count that asks the store costs no hand-off of its own; but under the loop's bridge
    (a PostgreSQL write alone) the limits' store, which blocks, is asked from a thread."""
    limiter: Limiter = request.app.state.limiter
    counted = False
    if limiter.counts_session(tenant, key):
        try:  # the limits' store blocks: off the loop when a write runs there
            counted = off_loop(lambda: limiter.count_session(request.app.state.ledger, tenant, key))
        except Refused as refusal:
            request.app.state.metrics.refusals.labels(refusal.code, refusal.limit).inc()
            raise
    try:
        yield
    except Exception:
        if counted:
            off_loop(lambda: limiter.uncount_session(tenant))
        raise
    limiter.session_exists(tenant, key)
