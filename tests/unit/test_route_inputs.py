"""A route's query string and headers as one model (api/inputs.py): what it reads, how it
refuses, and that the OpenAPI document lists every field of every route's model."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute
from pydantic import Field
from starlette.requests import Request

from session_ledger.api.app import create_app
from session_ledger.api.deps import ReadInputs, WriteInputs
from session_ledger.api.inputs import RouteInputs, route_inputs
from session_ledger.api.routes import messages, sessions, streams
from session_ledger.api.routes.messages import ContextInputs
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
    with pytest.raises(RequestValidationError) as caught:
        _parse(Probe, _request(query, headers))
    assert [list(e["loc"]) for e in caught.value.errors()] == [loc]


def test_a_refused_header_is_located_by_its_header_name() -> None:
    with pytest.raises(RequestValidationError) as caught:
        _parse(WriteInputs, _request(headers={"Idempotency-Key": "k" * 257}))
    assert [list(e["loc"]) for e in caught.value.errors()] == [["header", "idempotency-key"]]


def test_the_routes_models_are_found_through_their_dependencies() -> None:
    routes = {(r.path, m): r for r in messages.router.routes if isinstance(r, APIRoute)
              for m in r.methods}  # fmt: skip
    assert route_inputs(routes["/v1/sessions/{key}/context", "GET"]) == [ContextInputs]
    assert route_inputs(routes["/v1/sessions/{key}/messages", "POST"]) == [WriteInputs]
    head = next(r for r in sessions.router.routes if getattr(r, "path", "") == "/v1/sessions/{key}")
    assert route_inputs(head) == [ReadInputs]


def test_the_hot_routes_leave_fastapi_no_query_or_header_parameter_to_extract() -> None:
    # FastAPI extracts each such parameter on its own, ~11 µs each (request_params_to_args).
    for router in (messages.router, streams.router):
        for route in router.routes:
            assert isinstance(route, APIRoute)
            flat = route.dependant
            stack = [flat]
            while stack:
                node = stack.pop()
                assert not node.query_params and not node.header_params, route.path
                stack.extend(node.dependencies)


def test_the_openapi_document_lists_every_field_of_every_routes_model(tmp_path: Path) -> None:
    app = create_app(Settings(database_url=f"sqlite:///{tmp_path / 'l.db'}", auto_migrate=True))
    document = app.openapi()
    checked = 0
    for router in (messages.router, sessions.router, streams.router):
        for route in router.routes:
            if not isinstance(route, APIRoute):
                continue
            for method in route.methods:
                operation = document["paths"][route.path_format][method.lower()]
                listed = {(p["in"], p["name"]) for p in operation.get("parameters", [])}
                for model in route_inputs(route):
                    for name in model.model_fields:
                        where = ("header", name.replace("_", "-")) if name in model.HEADERS \
                            else ("query", name)  # fmt: skip
                        assert where in listed, (route.path, method, where)
                        checked += 1
    assert checked >= 40
    context = document["paths"]["/v1/sessions/{key}/context"]["get"]["parameters"]
    as_of = next(p for p in context if p["name"] == "as_of")
    assert as_of["schema"]["format"] == "date-time"  # "or null" dropped, as for FastAPI's
