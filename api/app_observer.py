"""The ledger's observer in the API: what the ledger reports (domain/observer.py) goes to
the app's Prometheus collectors and, when tracing is on, to a span per store call."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING

from .metrics import Metrics

if TYPE_CHECKING:
    from opentelemetry.trace import Tracer


class AppObserver:
    """Implements `domain.observer.LedgerObserver` over `metrics` and an optional tracer."""

    def __init__(self, metrics: Metrics, tracer: Tracer | None = None) -> None:
        self.metrics = metrics
        self.tracer = tracer

    @contextmanager
    def store_call(self, operation: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            if self.tracer is None:
                yield
            else:
                with self.tracer.start_as_current_span(f"store {operation}"):
                    yield
        finally:
            elapsed = time.perf_counter() - started
            self.metrics.store_latency.labels(operation).observe(elapsed)

    def events_written(self, topics: Sequence[str]) -> None:
        for topic in topics:
            self.metrics.events_written.labels(topic).inc()

    def write_retried(self) -> None:
        self.metrics.write_retries.inc()

    def version_conflict(self) -> None:
        self.metrics.version_conflicts.inc()
