"""Property-based run of the whole API from its own OpenAPI document (schemathesis).

In-process over ASGI, on a SQLite ledger: no network. Every generated request must get
an answer that the document describes (status, headers, body schema), and never a 5xx.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from schemathesis.checks import not_a_server_error
from schemathesis.generation import GenerationMode
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)  # fmt: skip

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import migrate, open_key_store, open_ledger
from session_ledger.api.settings import Settings
from tests.conftest import fresh_postgres_database

EXAMPLES_PER_OPERATION = 40
# Not "positive data acceptance": a schema-valid write is rightly refused when the
# session moved on (412), an idempotency key was used before, or initial_token_count
# exceeds token_limit; no OpenAPI schema can say so.
CHECKS = [
    not_a_server_error, status_code_conformance, content_type_conformance,
    response_schema_conformance, response_headers_conformance,
]  # fmt: skip
ADMIN_KEY = "sl_schemathesis_admin_key_0123456789"
# The document needs no store: read it once to make one test per operation and mode.
# Invalid requests exist only for operations that take some input.
OPERATIONS = [
    (method.upper(), path, mode)
    for path, methods in create_app(Settings(database_url="memory://")).openapi()["paths"].items()
    for method, operation in methods.items()
    for mode in (GenerationMode.POSITIVE, GenerationMode.NEGATIVE)
    if mode == GenerationMode.POSITIVE or "parameters" in operation or "requestBody" in operation
    # A live tail never ends: tests/e2e/test_live_tail.py drives it against real servers.
    if not path.endswith("/events/live")
]


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def api_schema(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[schemathesis.BaseSchema]:
    """The API on a fresh store of each kind, with one admin key."""
    with ExitStack() as stack:
        if request.param == "sqlite":
            path: Path = tmp_path_factory.mktemp("schemathesis") / "ledger.db"
            url = f"sqlite:///{path}"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_schemathesis"))
        yield from _schema(url)


def _schema(url: str) -> Iterator[schemathesis.BaseSchema]:
    config = Settings(database_url=url, tokenizer="whitespace", max_body_bytes=64 * 1024)
    migrate(config)
    store = open_key_store(config.database_url)
    store.ensure_admin(config.default_tenant, ADMIN_KEY)
    ledger = open_ledger(config)
    app = create_app(config, ledger=ledger, key_store=store)
    yield schemathesis.openapi.from_asgi("/openapi.json", app)
    ledger.close()
    store.close()


@pytest.mark.parametrize(
    ("method", "path", "mode"), OPERATIONS, ids=[" ".join(o) for o in OPERATIONS]
)
def test_every_operation_conforms_to_its_schema(
    api_schema: schemathesis.BaseSchema, method: str, path: str, mode: GenerationMode
) -> None:
    """Valid requests and invalid ones (negative mode): documented answers, never a 5xx."""
    operation = api_schema[path][method]

    @given(case=operation.as_strategy(generation_mode=mode))
    @settings(
        max_examples=EXAMPLES_PER_OPERATION,
        deadline=None,
        suppress_health_check=list(HealthCheck),
        derandomize=True,
        database=None,
    )
    def conforms(case: schemathesis.Case) -> None:
        case.call_and_validate(headers={"Authorization": f"Bearer {ADMIN_KEY}"}, checks=CHECKS)

    conforms()
