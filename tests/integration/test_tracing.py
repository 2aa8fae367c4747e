"""OpenTelemetry tracing: a server span per request, named by its route, with a child span
per store call; a caller's `traceparent` is continued. Spans go to an in-memory exporter
(nothing is sent anywhere); with no exporter configured no span is made. On every store:
on PostgreSQL the context read runs in a worker thread (`deps.short_read`), and its span
must still be the request's child."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings
from session_ledger.api.tracing import TracingMiddleware, open_tracer_provider
from tests.conftest import make_ledger, make_settings

MESSAGE = {"messages": [{"role": "user", "content": "hello"}]}


@pytest.fixture
def traced(store: str, tmp_path: Path) -> Iterator[tuple[TestClient, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    settings = make_settings(store, tmp_path)
    ledger = make_ledger(settings)
    keys = MemoryKeyStore()
    _, secret = keys.create("acme", "admin")
    app = create_app(settings, ledger=ledger, key_store=keys, tracer_provider=provider)
    try:
        yield TestClient(app, headers={"Authorization": f"Bearer {secret}"}), exporter
    finally:
        ledger.close()


def by_name(spans: tuple[ReadableSpan, ...]) -> dict[str, ReadableSpan]:
    return {span.name: span for span in spans}


def test_a_request_span_holds_its_store_calls(
    traced: tuple[TestClient, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    written = api.post("/v1/sessions/chat/messages", json=MESSAGE, headers={"X-Request-ID": "r-1"})
    assert written.status_code == 200
    assert api.get("/v1/sessions/chat/context").status_code == 200
    assert api.get("/v1/sessions/chat/messages").status_code == 200
    spans = by_name(exporter.get_finished_spans())
    for route, store_call in [
        ("POST /v1/sessions/{key}/messages", "store write"),
        ("GET /v1/sessions/{key}/context", "store read_window"),
        ("GET /v1/sessions/{key}/messages", "store read_history"),
    ]:
        request, store = spans[route], spans[store_call]
        assert request.kind == SpanKind.SERVER
        assert (
            request.attributes is not None
            and request.attributes["http.route"] == route.split(" ")[1]
        )
        assert request.attributes["http.response.status_code"] == 200
        assert store.parent is not None and request.context is not None
        assert store.parent.span_id == request.context.span_id  # a child, also across threads
        assert store.context is not None and store.context.trace_id == request.context.trace_id
    post = spans["POST /v1/sessions/{key}/messages"].attributes
    assert post is not None and post["session_ledger.request_id"] == "r-1"


def test_a_callers_trace_is_continued(traced: tuple[TestClient, InMemorySpanExporter]) -> None:
    api, exporter = traced
    trace_id, parent_id = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    api.get("/healthz", headers={"traceparent": f"00-{trace_id}-{parent_id}-01"})
    (span,) = exporter.get_finished_spans()
    assert span.name == "GET /healthz" and span.context is not None and span.parent is not None
    assert f"{span.context.trace_id:032x}" == trace_id
    assert f"{span.parent.span_id:016x}" == parent_id


def test_a_refused_write_makes_no_store_span(
    traced: tuple[TestClient, InMemorySpanExporter],
) -> None:
    api, exporter = traced
    refused = api.post("/v1/sessions/chat/messages", json=MESSAGE, headers={"If-Match": '"7"'})
    assert refused.status_code == 412
    spans = by_name(exporter.get_finished_spans())
    assert set(spans) == {"POST /v1/sessions/{key}/messages"}  # refused before the store
    attributes = spans["POST /v1/sessions/{key}/messages"].attributes
    assert attributes is not None and attributes["http.response.status_code"] == 412


def test_tracing_is_off_unless_an_exporter_is_configured() -> None:
    assert open_tracer_provider(Settings(database_url="memory://")) is None
    app = create_app(Settings(database_url="memory://"))
    assert all(m.cls is not TracingMiddleware for m in app.user_middleware)
    provider = open_tracer_provider(Settings(database_url="memory://", otel_exporter="otlp"))
    assert isinstance(provider, TracerProvider)  # made without reaching any collector
    provider.shutdown()


HOST_WITH_GLOBAL_TRACING = """
from fastapi.testclient import TestClient
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings

exporter = InMemorySpanExporter()
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(exporter))
trace.set_tracer_provider(provider)  # the host's, process-wide
settings = Settings(database_url="memory://", tokenizer="whitespace")
keys = MemoryKeyStore()
_, secret = keys.create("acme", "admin")
app = create_app(settings, ledger=open_ledger(settings), key_store=keys)
api = TestClient(app, headers={"Authorization": f"Bearer {secret}"})
assert api.post("/v1/sessions/c/messages", json={"messages": [{"role": "user",
                "content": "hi"}]}).status_code == 200
assert api.get("/v1/sessions/c/context").status_code == 200
print(len(exporter.get_finished_spans()))
"""


def test_the_app_makes_no_span_on_the_hosts_process_wide_provider() -> None:
    # (In a child process: a process-wide provider can be set only once.)
    import subprocess
    import sys

    found = subprocess.run([sys.executable, "-c", HOST_WITH_GLOBAL_TRACING],
                           capture_output=True, text=True, timeout=120)  # fmt: skip
    assert found.returncode == 0, found.stderr
    assert found.stdout.strip() == "0"
