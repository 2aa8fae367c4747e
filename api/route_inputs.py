"""The query string and headers of a route as ONE pydantic model, validated in one call.

FastAPI extracts and validates each declared `Query` or `Header` parameter on its own
(`request_params_to_args`): about 11 µs a parameter, 80 of a window read's 370 µs in
one process with its seven. A route's `RouteInputs` model takes them all at once: its
`parse` is the route's dependency (a node with only the request as parameter, which
FastAPI hands over as it is), and a value the model refuses is the same 422 as before,
with the same `loc` (`["query", name]` or `["header", name]`). FastAPI does not see the
fields as parameters, so `document_inputs` adds them to the OpenAPI document of every
route that depends on the model. Every route takes its query and headers so; none
declares a FastAPI `Query` or `Header` parameter.

A field is read from the query string, or from the header of its name (`_` as `-`) when
it is listed in `HEADERS`; a field with an alias (`Field(alias="from")`: a name Python
cannot take) is read, refused and documented under its alias instead, as the query key
or as the header's name. A query key that is not a field is ignored, as FastAPI does,
and of a repeated key the last value counts, as FastAPI's.
"""

from __future__ import annotations

import functools
from collections.abc import Iterator
from typing import Any, ClassVar, Self
from urllib.parse import unquote_to_bytes

from fastapi import Request
from fastapi.dependencies.models import Dependant
from fastapi.exceptions import RequestValidationError
from fastapi.routing import APIRoute, APIRouter
from pydantic import BaseModel, ConfigDict, ValidationError

from session_ledger.domain.errors import InvalidInput


class RouteInputs(BaseModel):
    """The inputs of a route outside its path and body; see the module's docstring."""

    model_config = ConfigDict(extra="ignore", frozen=True)
    HEADERS: ClassVar[frozenset[str]] = frozenset()  # the fields read from headers

    @classmethod
    async def parse(cls, request: Request) -> Self:
        """The route's inputs from `request` (a dependency: `Depends(Model.parse)`)."""
        query = request.scope.get("query_string", b"")
        if query and not _utf8(query):
            raise InvalidInput("a query parameter is not percent-encoded UTF-8")
        values: dict[str, Any] = dict(request.query_params)
        for key, header in _headers(cls).items():
            values.pop(key, None)  # a header's field is never taken from the query
            given = request.headers.getlist(header)
            if given:  # (several lines are one list, as HTTP reads them, not the first)
                values[key] = ", ".join(given)
        try:
            return cls.model_validate(values)
        except ValidationError as error:
            raise RequestValidationError([
                {**e, "loc": cls._where(e["loc"])} for e in error.errors(include_url=False)
            ]) from None  # fmt: skip

    @classmethod
    def _where(cls, loc: tuple[Any, ...]) -> tuple[Any, ...]:
        header = _headers(cls).get(loc[0]) if loc else None
        return ("query", *loc) if header is None else ("header", header, *loc[1:])

    @classmethod
    def openapi_parameters(cls) -> list[dict[str, Any]]:
        """The fields as OpenAPI parameters, each with its JSON schema."""
        properties = cls.model_json_schema()["properties"]  # by the keys validated
        headers = _headers(cls)
        parameters = []
        for name, field in cls.model_fields.items():
            key = field.alias or name
            schema = dict(properties[key])
            description = schema.pop("description", None)
            parameter = {
                "name": headers.get(key, key),
                "in": "header" if key in headers else "query",
                "required": field.is_required(),
                "schema": schema,
            }
            if description is not None:
                parameter["description"] = description
            parameters.append(parameter)
        return parameters


@functools.cache
def _headers(model: type[RouteInputs]) -> dict[str, str]:
    """The header fields of `model`, by the key each is validated under (its alias, else
    its name): the header each is read from (its alias, else its name with `_` as `-`)."""
    fields = model.model_fields
    return {(fields[name].alias or name): (fields[name].alias or name.replace("_", "-"))
            for name in model.HEADERS}  # fmt: skip


def route_inputs(route: APIRoute) -> list[type[RouteInputs]]:
    """The `RouteInputs` models `route` depends on, in the order of its dependencies."""
    return list(_models(route.dependant))


def _models(dependant: Dependant) -> Iterator[type[RouteInputs]]:
    # A dependency on a model is one of its class methods (`parse`, or one that derives
    # from it, as `ReadInputs.options`).
    for sub in dependant.dependencies:
        owner = getattr(sub.call, "__self__", None)
        if isinstance(owner, type) and issubclass(owner, RouteInputs):
            yield owner
        yield from _models(sub)


def document_inputs(document: dict[str, Any], routers: list[APIRouter]) -> None:
    """Add the fields of the `RouteInputs` models each route of `routers` depends on to
    its operations in the OpenAPI `document`."""
    for route in (route for router in routers for route in router.routes):
        if not (isinstance(route, APIRoute) and route.include_in_schema):
            continue
        added = [p for model in route_inputs(route) for p in model.openapi_parameters()]
        if not added:
            continue
        for method in route.methods:
            operation = document["paths"][route.path_format][method.lower()]
            operation.setdefault("parameters", []).extend(added)


def _utf8(query: bytes) -> bool:
    """Whether every name and value of a query string decodes as UTF-8 (Starlette would
    read a byte that does not as U+FFFD, and answer for a prefix the caller never sent)."""
    try:
        unquote_to_bytes(query.replace(b"+", b" ")).decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True
