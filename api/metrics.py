"""Prometheus metrics of one API process: requests by route and status, and latency.

Each app gets its own registry (several apps in one test process must not collide).
With several uvicorn workers each process reports its own numbers.
"""

from __future__ import annotations

import time

from prometheus_client import CollectorRegistry, Counter, Histogram
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class Metrics:
    """The collectors of one app."""

    def __init__(self) -> None:
        self.in_flight = 0  # HTTP requests begun and not yet answered (the event loop's)
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "session_ledger_http_requests", "HTTP requests answered.",
            ["method", "route", "status"], registry=self.registry,
        )  # fmt: skip
        self.latency = Histogram(
            "session_ledger_http_request_duration_seconds", "Time to answer an HTTP request.",
            ["method", "route"], registry=self.registry,
        )  # fmt: skip


class MetricsMiddleware:
    """Counts and times every HTTP request, labelled by its route template."""

    def __init__(self, app: ASGIApp, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        status = 500
        started = time.perf_counter()

        async def recording_send(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        self.metrics.in_flight += 1
        try:
            await self.app(scope, receive, recording_send)
        finally:
            self.metrics.in_flight -= 1
            # The router stores the matched route in the scope; its template keeps the
            # label set small (no session keys in label values).
            route = getattr(scope.get("route"), "path", "unmatched")
            self.metrics.requests.labels(scope["method"], route, str(status)).inc()
            elapsed = time.perf_counter() - started
            self.metrics.latency.labels(scope["method"], route).observe(elapsed)
