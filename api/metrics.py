"""Prometheus metrics: HTTP requests and latency, and what the ledger did (events written
by type, write retries and version conflicts, store call latency), and rate-limit refusals.

Each app gets its own registry (several apps in one test process must not collide).
`serve` with several workers makes them a folder (`shared_by_workers`), which each worker
names in its own `PROMETHEUS_MULTIPROC_DIR` (cli/serve_commands.py): every worker then
writes its numbers to files there, and `/metrics`, whichever worker answers, sums them all
(prometheus_client's multiprocess mode).
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from starlette.types import ASGIApp, Message, Receive, Scope, Send

MULTIPROC_DIR = "PROMETHEUS_MULTIPROC_DIR"
# Store calls take from a fraction of a millisecond (a window read) to seconds (a large
# write): finer low buckets than the client library's default, which start at 5 ms.
STORE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10)


class Metrics:
    """The collectors of one app."""

    def __init__(self) -> None:
        self.in_flight = 0  # HTTP requests begun and not yet answered (the event loop's)
        self.registry = registry = CollectorRegistry()
        self.requests = Counter(
            "session_ledger_http_requests", "HTTP requests answered.",
            ["method", "route", "status"], registry=registry,
        )  # fmt: skip
        self.latency = Histogram(
            "session_ledger_http_request_duration_seconds", "Time to answer an HTTP request.",
            ["method", "route"], registry=registry,
        )  # fmt: skip
        self.events_written = Counter(
            "session_ledger_events_written", "Events stored, by type (e.g. MessagesAppended).",
            ["type"], registry=registry,
        )  # fmt: skip
        self.write_retries = Counter(
            "session_ledger_write_retries",
            "Writes that lost the race for their session's next version and ran again.",
            registry=registry,
        )
        self.version_conflicts = Counter(
            "session_ledger_version_conflicts",
            "Writes refused because the session was not at their expected version.",
            registry=registry,
        )
        self.store_latency = Histogram(
            "session_ledger_store_duration_seconds",
            "Time of one store call, by operation (write, read_window, read_history).",
            ["operation"], buckets=STORE_BUCKETS, registry=registry,
        )  # fmt: skip
        self.refusals = Counter(
            "session_ledger_rate_limit_refusals",
            "Requests refused (429) by a rate limit or quota, by code and limit.",
            ["code", "limit"], registry=registry,
        )  # fmt: skip
        # Each standby as the read router last saw it, set when `/metrics` is scraped;
        # across workers the most recent scrape's value counts.
        self.replica_lag = Gauge(
            "session_ledger_replica_lag_seconds", "How far a read replica is behind the primary.",
            ["replica"], multiprocess_mode="mostrecent", registry=registry,
        )  # fmt: skip
        self.replica_serving = Gauge(
            "session_ledger_replica_serving", "1 while a read replica serves reads, else 0.",
            ["replica"], multiprocess_mode="mostrecent", registry=registry,
        )  # fmt: skip

    def observe_replicas(self, replicas: Iterable[Any]) -> None:
        """Each standby's lag and whether it serves (`ReplicaSet.status()`); a lag not
        measured yet (the standby unreachable) is NaN."""
        for r in replicas:
            lag = float("nan") if r.lag_seconds is None else r.lag_seconds
            self.replica_lag.labels(r.name).set(lag)
            self.replica_serving.labels(r.name).set(1 if r.serving else 0)

    def exposition(self) -> bytes:
        """The text `/metrics` answers: this process's collectors, or, in multiprocess
        mode, every worker's summed."""
        path = os.environ.get(MULTIPROC_DIR)
        if not path:
            return generate_latest(self.registry)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=path)
        return generate_latest(registry)


@contextmanager
def shared_by_workers() -> Iterator[str]:
    """A temporary folder for the metric files of `serve`'s worker processes, removed
    after the block."""
    path = tempfile.mkdtemp(prefix="session-ledger-metrics-")
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


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
