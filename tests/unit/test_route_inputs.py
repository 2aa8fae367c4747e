"""A route's query string and headers as one model (api/route_inputs.py): what it reads, how it
refuses, and that the OpenAPI document lists every field of every route's model."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import Field
from starlette.requests import Request
from starlette.routing import BaseRoute

from session_ledger.api.app import create_app
from session_ledger.api.deps import ReadInputs, WriteInputs
from session_ledger.api.route_inputs import RouteInputs, route_inputs
from session_ledger.api.routes import message_routes, sessions
from session_ledger.api.routes.live import SessionTailInputs
from session_ledger.api.routes.message_routes import ContextInputs
from session_ledger.api.routes.search import SearchInputs
from session_ledger.api.settings import Settings


class Probe(RouteInputs):
    HEADERS = frozenset({"if_match"})
    limit: int = Field(10, ge=1)
    if_match: str | None = None


def _request(query: bytes = b"", headers: dict[str, str] | None = None) -> Request:
    raw = [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    return Request({"type": "http", "method": "GET", "path": "/", "query_string": query,
                    "headers": raw})  # fmt: skip


def _parse(model: type[RouteInputs], request: Request) -> Any:
    return asyncio.run(model.parse(request))


def _refused(model: type[RouteInputs], request: Request) -> list[list[str]]:
    with pytest.raises(RequestValidationError) as caught:
        _parse(model, request)
    return [list(e["loc"]) for e in caught.value.errors()]


@pytest.fixture
def app(tmp_path: Path) -> FastAPI:
    """The whole app: every router, the viewer's (not in the API document) included."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'l.db'}", auto_migrate=True, ui=True)
    return create_app(settings)


def _routes(routes: Sequence[BaseRoute]) -> Iterator[APIRoute]:
    """Every route of `routes`, those of the routers they include (as create_app includes
    each router: FastAPI keeps it whole, as `original_router`) too."""
    for route in routes:
        if isinstance(route, APIRoute):
            yield route
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _routes(included.routes)


def _parameter(model: type[RouteInputs], name: str) -> tuple[str, str]:
    """Where the field `name` of `model` is read: ("query" or "header", its name there)."""
    alias = model.model_fields[name].alias
    if name in model.HEADERS:
        return "header", alias or name.replace("_", "-")
    return "query", alias or name


def test_query_and_headers_are_read_and_unknown_keys_ignored() -> None:
    found = _parse(Probe, _request(b"limit=5&other=x", {"If-Match": '"3"'}))
    assert (found.limit, found.if_match) == (5, '"3"')
    assert _parse(Probe, _request()).limit == 10


def test_a_repeated_key_counts_its_last_value_as_fastapi_does() -> None:
    assert _parse(Probe, _request(b"limit=5&limit=7")).limit == 7


def test_a_header_field_is_never_taken_from_the_query() -> None:
    assert _parse(Probe, _request(b"if_match=%223%22")).if_match is None


@pytest.mark.parametrize(
    ("query", "headers", "loc"),
    [
        (b"limit=0", {}, ["query", "limit"]),
        (b"limit=x", {}, ["query", "limit"]),
        (b"limit=", {}, ["query", "limit"]),
    ],
)
def test_a_refused_value_is_fastapis_422_with_its_loc(
    query: bytes, headers: dict[str, str], loc: list[str]
) -> None:
    assert _refused(Probe, _request(query, headers)) == [loc]


def test_a_refused_header_is_located_by_its_header_name() -> None:
    refused = _refused(WriteInputs, _request(headers={"Idempotency-Key": "k" * 257}))
    assert refused == [["header", "idempotency-key"]]
    too_long = _request(headers={"Last-Event-ID": "1" * 1025})  # (shorter: the route's 400)
    assert _refused(SessionTailInputs, too_long) == [["header", "last-event-id"]]
    assert _parse(SessionTailInputs, _request(headers={"Last-Event-ID": "7"})).last_event_id == "7"


def test_an_aliased_field_is_read_refused_and_documented_under_its_alias(app: FastAPI) -> None:
    moment = datetime(2024, 5, 1, tzinfo=UTC)
    assert _parse(SearchInputs, _request(b"from=2024-05-01T00:00:00Z")).start == moment
    assert _parse(SearchInputs, _request(b"start=2024-05-01T00:00:00Z")).start is None  # as FastAPI
    assert _refused(SearchInputs, _request(b"from=yesterday")) == [["query", "from"]]
    with pytest.raises(RequestValidationError) as caught:  # InRange still applies
        _parse(SearchInputs, _request(b"to=0001-01-01T00:00:00%2B01:00"))
    assert [(list(e["loc"]), "years 1 to 9999" in e["msg"]) for e in caught.value.errors()] == [
        (["query", "to"], True)
    ]
    listed = app.openapi()["paths"]["/v1/events"]["get"]["parameters"]
    found = {p["name"]: p for p in listed}
    assert {"from", "to"} <= found.keys() and not {"start", "end"} & found.keys()
    assert found["from"]["in"] == "query" and found["from"]["schema"]["format"] == "date-time"


class AliasedHeader(RouteInputs):
    HEADERS = frozenset({"event_id"})
    event_id: str | None = Field(None, alias="Last-Event-ID", max_length=2)


def test_a_header_field_with_an_alias_is_the_header_of_its_alias() -> None:
    assert _parse(AliasedHeader, _request(headers={"last-event-id": "7"})).event_id == "7"
    assert _parse(AliasedHeader, _request(headers={"event-id": "7"})).event_id is None
    assert _parse(AliasedHeader, _request(b"Last-Event-ID=7")).event_id is None
    refused = _refused(AliasedHeader, _request(headers={"Last-Event-ID": "123"}))
    assert refused == [["header", "Last-Event-ID"]]
    [parameter] = AliasedHeader.openapi_parameters()
    assert (parameter["in"], parameter["name"]) == ("header", "Last-Event-ID")


def test_the_routes_models_are_found_through_their_dependencies() -> None:
    routes = {(r.path, m): r for r in message_routes.router.routes if isinstance(r, APIRoute)
              for m in r.methods}  # fmt: skip
    assert route_inputs(routes["/v1/sessions/{key}/context", "GET"]) == [ContextInputs]
    assert route_inputs(routes["/v1/sessions/{key}/messages", "POST"]) == [WriteInputs]
    head = next(r for r in sessions.router.routes if getattr(r, "path", "") == "/v1/sessions/{key}")
    assert route_inputs(head) == [ReadInputs]


def test_no_route_leaves_fastapi_a_query_or_header_parameter_to_extract(app: FastAPI) -> None:
    # FastAPI extracts each such parameter on its own, ~11 µs each (request_params_to_args):
    # every route takes its query and headers as one model.
    routes = list(_routes(app.routes))
    assert {r.path for r in routes} >= {"/v1/sessions/{key}/context", "/v1/events/live",
                                        "/v1/package", "/healthz", "/ui/{name}"}  # fmt: skip
    for route in routes:
        stack = [route.dependant]
        while stack:
            node = stack.pop()
            assert not node.query_params and not node.header_params, route.path
            stack.extend(node.dependencies)


def test_the_openapi_document_lists_every_field_of_every_routes_model(app: FastAPI) -> None:
    document = app.openapi()
    checked, models = 0, set()
    for route in _routes(app.routes):
        if not route.include_in_schema:
            continue
        for method in route.methods:
            operation = document["paths"][route.path_format][method.lower()]
            listed = [(p["in"], p["name"]) for p in operation.get("parameters", [])]
            assert len(listed) == len(set(listed)), (route.path, method)
            for model in route_inputs(route):
                models.add(model)
                for name in model.model_fields:
                    where = _parameter(model, name)
                    assert where in listed, (route.path, method, where)
                    checked += 1
    assert checked >= 95 and len(models) >= 16
    context = document["paths"]["/v1/sessions/{key}/context"]["get"]["parameters"]
    as_of = next(p for p in context if p["name"] == "as_of")
    assert as_of["schema"]["format"] == "date-time"  # "or null" dropped, as for FastAPI's
