"""Liveness, readiness and Prometheus metrics: the only routes without an API key."""

from __future__ import annotations

import logging

from fastapi import APIRouter, Request, Response
from prometheus_client import CONTENT_TYPE_LATEST

from session_ledger.domain.errors import StoreNotReady

from ..deps import KeyStoreDep, LedgerDep
from ..http_errors import ERROR_RESPONSES
from ..schemas import Status

router = APIRouter(tags=["health"])
log = logging.getLogger("session_ledger.api")


@router.get("/healthz", response_model=Status)
def healthz() -> Status:
    """The process is up (says nothing about the store)."""
    return Status(status="ok")


@router.get("/readyz", response_model=Status, responses={503: ERROR_RESPONSES[503]})
def readyz(ledger: LedgerDep, store: KeyStoreDep) -> Status:
    """The store is reachable and migrated: ready for traffic."""
    try:
        ledger.keys(limit=1)
        store.ping()
    except Exception as exc:  # any failure of the probe means "not ready", never a 500
        # Its text names paths, hosts and ports: for the log, not for an unkeyed caller.
        log.warning("not ready: %s: %s", type(exc).__name__, exc)
        raise StoreNotReady("the store is not ready; the server log says why") from None
    return Status(status="ready")


@router.get(
    "/metrics",
    response_class=Response,
    responses={200: {"content": {CONTENT_TYPE_LATEST: {}}, "description": "Prometheus text."}},
)
def metrics(request: Request) -> Response:
    """Request counts and latencies, and the ledger's own numbers, in Prometheus' text
    format: of every worker process of `serve`, summed."""
    state = request.app.state
    routing = getattr(state.ledger.views, "read_routing", None)
    if routing is not None:  # PostgreSQL standbys: their lag as the router sees it now
        state.metrics.observe_replicas(routing.status())
    return Response(state.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)
