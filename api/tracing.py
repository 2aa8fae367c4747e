"""OpenTelemetry tracing of requests and store calls, when an exporter is configured.

Off by default (`LEDGER_OTEL_EXPORTER=none`): no span is made and the `otel` extra need
not be installed. The app uses a tracer provider of its own, never the process-wide one:
a host that mounts the app keeps its own tracing setup.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from .logs import current_request_id
from .settings import ServerSettings

if TYPE_CHECKING:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.trace import Tracer

INSTRUMENTATION = "session_ledger"


def open_tracer_provider(settings: ServerSettings) -> TracerProvider | None:
    """The tracer provider `settings` asks for (None: tracing off). The OTLP exporter
    reads its endpoint and headers from the standard `OTEL_EXPORTER_OTLP_*` variables."""
    if settings.otel_exporter == "none":
        return None
    try:
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor, ConsoleSpanExporter
    except ImportError:
        raise RuntimeError(
            "LEDGER_OTEL_EXPORTER needs the OpenTelemetry packages: "
            "pip install 'session-audit-ledger[otel]'"
        ) from None
    provider = TracerProvider(
        resource=Resource.create({"service.name": settings.otel_service_name})
    )
    if settings.otel_exporter == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    else:
        provider.add_span_processor(BatchSpanProcessor(ConsoleSpanExporter()))
    return provider


class TracingMiddleware:
    """A server span per HTTP request (named by its route template), continuing the
    caller's trace when it sends a W3C `traceparent`."""

    def __init__(self, app: ASGIApp, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        from opentelemetry import propagate, trace

        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        carrier = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
        attributes: dict[str, Any] = {"http.request.method": scope["method"]}
        if (request_id := current_request_id.get()) is not None:
            attributes["session_ledger.request_id"] = request_id
        with self.tracer.start_as_current_span(
            scope["method"], context=propagate.extract(carrier),
            kind=trace.SpanKind.SERVER, attributes=attributes,
        ) as span:  # fmt: skip

            async def recording_send(message: Message) -> None:
                if message["type"] == "http.response.start":
                    span.set_attribute("http.response.status_code", message["status"])
                    if message["status"] >= 500:
                        span.set_status(trace.StatusCode.ERROR)
                await send(message)

            try:
                await self.app(scope, receive, recording_send)
            finally:
                route = getattr(scope.get("route"), "path", None)
                if route is not None:
                    span.set_attribute("http.route", route)
                    span.update_name(f"{scope['method']} {route}")
