"""The HTTP application: `create_app(settings)` wires routers, errors, limits, metrics.

The ledger and the key store are opened in the lifespan (not at import), from the
one database URL of the settings, unless the caller hands in its own.
"""

from __future__ import annotations

import gc
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from fastapi.openapi.utils import get_openapi
from fastapi.routing import APIRoute

from session_ledger.domain.ledger import Ledger
from session_ledger.projections.async_bridge import bridged

from . import http_errors
from .admission import enforce_limits
from .app_observer import AppObserver
from .auth import bearer
from .feed_cursors import ServerFeedCursors
from .keystore import KeyStore
from .live_hub import LiveHub
from .live_tails import LiveTails
from .logs import RequestIds
from .metrics import Metrics, MetricsMiddleware
from .middleware import AuthenticatedBodies, BodyLimit, RawSessionPath
from .ratelimit import Limiter
from .route_inputs import document_inputs
from .routes import (
    access_log_routes,
    checkpoints,
    compliance_routes,
    diff,
    docs,
    events,
    export_routes,
    heads,
    health,
    keys,
    live,
    message_routes,
    package_routes,
    replay,
    search,
    sessions,
    stream_routes,
    ui,
    verify,
)
from .settings import Settings
from .timers import sweeping
from .tracing import TracingMiddleware, open_tracer_provider

DISTRIBUTION = "session-audit-ledger"  # the package index name (pyproject.toml)

DESCRIPTION = """Event-sourced conversation memory for LLM agents.

Authenticate with `Authorization: Bearer <API key>`. Session keys are sent
percent-encoded as one path segment (`/` as `%2F`). Every error answers
`{"error": {"code", "message", "details"}}`.
"""


def _version() -> str:
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return "0"


def create_app(
    settings: Settings, ledger: Ledger | None = None, key_store: KeyStore | None = None,
    limiter: Limiter | None = None, *, owns_process: bool = False,
    tracer_provider: Any = None,
) -> FastAPI:  # fmt: skip
    """The API over `ledger` (or one opened from `settings.database_url` at start-up).
    `owns_process`: the app is the whole process (`serve`), not mounted in a host's app,
    so it may tune the process's garbage collector. `tracer_provider`: an OpenTelemetry
    provider for the spans (else one made from `settings.otel_exporter`, or none)."""
    opened_provider = tracer_provider is None and settings.otel_exporter != "none"
    if opened_provider:
        tracer_provider = open_tracer_provider(settings)
    tracer = None if tracer_provider is None else tracer_provider.get_tracer("session_ledger")

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        # the root picks the store
        from .bootstrap import open_key_store, open_ledger, reads_in_process, store_bridged

        if ledger is None:
            # `serve` made the tables already unless LEDGER_MIGRATE_ON_START=false, which
            # asks for an explicit `migrate`: the server never makes them on its own.
            app.state.ledger = open_ledger(
                settings, auto_migrate=False, serving=True, observer=observer
            )
        app.state.reads_in_process = reads_in_process(app.state.ledger)
        # Only a ledger this lifespan opens reads on its loop: its loop pool lives and is
        # closed with it (a handed-in ledger may outlive the loop, or serve several).
        app.state.store_bridged = ledger is None and store_bridged(app.state.ledger)
        if key_store is None:
            app.state.key_store = open_key_store(
                settings.database_url,
                pool_size=settings.pool_size,
                lock_timeout=settings.lock_timeout_seconds,
                connect_wait=settings.store_wait_seconds,
            )
        # The limiter create_app opened for a handed-in ledger outlives any one lifespan
        # (a test client may run several over one app); only one opened here closes here.
        opened_limiter = app.state.limiter is None
        if opened_limiter:
            app.state.limiter = open_limiter(settings)
        if owns_process:
            # What start-up made lives as long as the process: keep it out of the
            # collector's full passes, which otherwise rescan it on every few large reads.
            gc.freeze()
        hub = app.state.live_hub = LiveHub(
            app.state.ledger, settings.database_url, settings.tail_poll_ms / 1000
        )
        hub.start()
        tails = app.state.live_tails = LiveTails(
            app.state.key_store, per_key=settings.tail_max_per_key,
            per_tenant=settings.tail_max_per_tenant, max_seconds=settings.tail_max_seconds,
            check_seconds=settings.tail_key_check_ms / 1000,
        )  # fmt: skip
        tails.start()
        app.state.feed_cursors = ServerFeedCursors(
            settings.feed_cursor_key, app.state.key_store.feed_cursor_secret
        )
        try:
            async with sweeping(app.state.ledger, settings.stream_timeout_seconds):
                yield
        finally:
            try:
                await tails.stop()
                await hub.stop()
                if opened_limiter:
                    app.state.limiter.store.close()
                    app.state.limiter = None
                if key_store is None:
                    app.state.key_store.close()
            finally:
                # Whatever failed above: the loop's PostgreSQL pool must close in this
                # loop, or its tasks keep the loop from ending (the process from exiting).
                if ledger is None:
                    await bridged(app.state.ledger.close)
            if opened_provider:
                tracer_provider.force_flush()  # the spans still batched (it ends at exit)

    # FastAPI's own telemetry reports to the process-wide OpenTelemetry providers, which
    # the app leaves to its host (tracing.py uses a provider of its own); off, it also
    # spares every request the check of those providers (4 µs).
    app = FastAPI(
        title="session-ledger", version=_version(), description=DESCRIPTION, lifespan=lifespan,
        telemetry={"tracing": False, "metrics": False, "logs": False},
        docs_url=None, redoc_url=None,  # FastAPI's load a CDN's latest: routes/docs.py
    )  # fmt: skip
    app.state.settings = settings
    # What the caller hands in is usable at once, also without running the lifespan.
    app.state.ledger, app.state.key_store = ledger, key_store
    app.state.reads_in_process = False
    app.state.store_bridged = False
    if ledger is not None:
        from .bootstrap import reads_in_process

        app.state.reads_in_process = reads_in_process(ledger)
    # A caller that hands in its ledger may never run the lifespan: its limits too.
    app.state.limiter = limiter or (open_limiter(settings) if ledger is not None else None)
    app.state.metrics = Metrics()
    observer = AppObserver(app.state.metrics, tracer)
    if ledger is not None:
        ledger.observer = observer
    http_errors.register(app)
    limited = [module.router for module in (
        message_routes, stream_routes, events, live, replay, diff, verify, compliance_routes,
        search, sessions, heads, export_routes, package_routes, checkpoints, access_log_routes,
        keys,
    )]  # fmt: skip
    for router in limited:
        app.include_router(router, dependencies=[Depends(enforce_limits)])
    app.include_router(health.router)  # never limited: probes and scrapes must get through
    if settings.ui:
        app.include_router(ui.router)
    if settings.docs:
        app.include_router(docs.router)
    # Added last = runs first: the request id is set for everything after it, metrics
    # see every answer, the 413 check runs before routing, and a limited route's body is
    # read only once its request is authenticated.
    app.add_middleware(AuthenticatedBodies, routes=[r for router in limited for r in router.routes])
    app.add_middleware(RawSessionPath)
    app.add_middleware(BodyLimit, max_bytes=settings.max_body_bytes)
    app.add_middleware(MetricsMiddleware, metrics=app.state.metrics)
    if tracer is not None:
        app.add_middleware(TracingMiddleware, tracer=tracer)
    app.add_middleware(RequestIds)
    app.openapi = _openapi_without_null_parameters(app, limited)  # type: ignore[method-assign]
    return app


def open_limiter(settings: Settings) -> Limiter:
    """The rate limits and quotas of `settings`, kept in the store of its database URL."""
    from .bootstrap import open_limit_store

    store = open_limit_store(settings.database_url, pool_size=settings.pool_size,
                             lock_timeout=settings.lock_timeout_seconds)  # fmt: skip
    return Limiter(settings, store)


def _openapi_without_null_parameters(
    app: FastAPI, limited: list[APIRouter]
) -> Callable[[], dict[str, Any]]:
    """The OpenAPI document, with the fields of the routes' `RouteInputs` models as
    parameters, where an optional query or header parameter is just optional, and every
    operation of the `limited` routers (behind `enforce_limits`) names the bearer key it
    needs.

    FastAPI describes `str | None` parameters as "string or null", but a header or query
    value cannot be null: it is absent. Generators (schemathesis) would send "null".
    `enforce_limits` authenticates from the request itself (a dependency node of its own
    for the Authorization header would cost every request), so its security scheme is
    written here.
    """

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is None:
            document = get_openapi(title=app.title, version=app.version,
                                   description=app.description, routes=app.routes)  # fmt: skip
            document_inputs(document, limited)
            for path in document.get("paths", {}).values():
                for operation in path.values():
                    for parameter in operation.get("parameters", []):
                        _drop_null(parameter["schema"])
            _document_bearer(document, limited)
            app.openapi_schema = document
        return app.openapi_schema

    return openapi


def _document_bearer(document: dict[str, Any], routers: list[APIRouter]) -> None:
    schemes = document.setdefault("components", {}).setdefault("securitySchemes", {})
    schemes[bearer.scheme_name] = bearer.model.model_dump(mode="json", by_alias=True,
                                                          exclude_none=True)  # fmt: skip
    for router in routers:
        for route in router.routes:
            if isinstance(route, APIRoute) and route.include_in_schema:
                for method in route.methods:
                    operation = document["paths"][route.path_format][method.lower()]
                    operation["security"] = [{bearer.scheme_name: []}]


def _drop_null(schema: dict[str, Any]) -> None:
    choices = schema.get("anyOf", [])
    rest = [c for c in choices if c.get("type") != "null"]
    if len(rest) == 1 and len(choices) == 2:
        del schema["anyOf"]
        schema.update(rest[0])


def app_from_env() -> FastAPI:
    """The app configured by `LEDGER_*` variables, for a server started by uvicorn
    itself (`uvicorn --factory session_ledger.api.app:app_from_env`); `serve` hands its
    workers its own settings instead (cli/serve_commands.py)."""
    return create_app(Settings(), owns_process=True)
