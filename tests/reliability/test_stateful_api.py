"""Schemathesis in stateful mode, with an API key: sequences of calls where each step
uses what an earlier one made (a session written, then read, replaced, archived,
exported; a key created, then revoked). Every answer must be documented, never a 5xx.

Each scenario runs as the admin of a tenant of its own, so it starts from an empty
store as far as it can see: Hypothesis replays a scenario (to report it, to shrink it)
and must get the same answers, which it would not if an earlier run had already
written its sessions (it stops with FlakyStrategyDefinition instead of the failure)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, settings
from schemathesis.checks import not_a_server_error
from schemathesis.specs.openapi.checks import (
    content_type_conformance,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import migrate, open_key_store, open_ledger
from session_ledger.api.settings import Settings
from tests.conftest import fresh_postgres_database

CHECKS = [
    not_a_server_error, status_code_conformance, content_type_conformance,
    response_schema_conformance, response_headers_conformance,
]  # fmt: skip
SESSION = "/v1/sessions/{key}"


def with_links(document: dict[str, Any]) -> dict[str, Any]:
    """The API document with the links between its operations (OpenAPI `links`): every
    session write leads to every operation on the same session; a new key to its revoke."""
    paths = document["paths"]
    on_session = [
        (path, method, operation["operationId"])
        for path, methods in paths.items() if path.startswith(SESSION)
        for method, operation in methods.items()
    ]  # fmt: skip
    for _, method, operation_id in on_session:
        if method == "get":
            continue
        source = next(m[method] for p, m in paths.items() if m.get(method, {}).get(
            "operationId") == operation_id)  # fmt: skip
        answered = next(code for code in source["responses"] if code.startswith("2"))
        source["responses"][answered]["links"] = {
            f"to_{target}": {"operationId": target, "parameters": {"key": "$request.path.key"}}
            for _, _, target in on_session
        }
    created = paths["/v1/keys"]["post"]["responses"]["201"]
    revoke = paths["/v1/keys/{key_id}"]["delete"]["operationId"]
    created["links"] = {
        "revoke": {"operationId": revoke, "parameters": {"key_id": "$response.body#/id"}}
    }
    return document


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def state_machine(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[type[Any]]:
    with ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path / 'ledger.db'}"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_stateful"))
        config = Settings(database_url=url, tokenizer="whitespace", max_body_bytes=64 * 1024)
        migrate(config)
        store = open_key_store(url)
        stack.callback(store.close)
        ledger = open_ledger(config)
        stack.callback(ledger.close)
        app = create_app(config, ledger=ledger, key_store=store)
        schema = schemathesis.openapi.from_dict(with_links(app.openapi()))
        schema.app = app
        base = schema.as_state_machine()

        class Authenticated(base):  # type: ignore[valid-type,misc]
            answers: Counter[int] = Counter()
            scenarios = 0
            secret = ""

            def setup(self) -> None:
                cls = type(self)
                cls.scenarios += 1
                _, self.secret = store.create(f"stateful-{cls.scenarios}", "admin", "stateful")

            def get_call_kwargs(self, case: schemathesis.Case) -> dict[str, Any]:
                return {"headers": {"Authorization": f"Bearer {self.secret}"}}

            def validate_response(
                self, response: Any, case: schemathesis.Case, additional_checks: Any = None,
                **kwargs: Any,
            ) -> None:  # fmt: skip
                self.answers[response.status_code // 100 * 100] += 1
                case.validate_response(response, checks=CHECKS, transport_kwargs=kwargs)

        yield Authenticated


LONG = pytest.param(200, id="long", marks=[pytest.mark.long_run, pytest.mark.timeout(3600)])


@pytest.mark.parametrize("scenarios", [pytest.param(15, id="short"), LONG])
def test_call_sequences_get_documented_answers(state_machine: type[Any], scenarios: int) -> None:
    state_machine.run(
        settings=settings(
            max_examples=scenarios,
            stateful_step_count=8,
            deadline=None,
            database=None,
            derandomize=True,
            suppress_health_check=list(HealthCheck),
        )
    )
    answers = state_machine.answers
    print(
        f"stateful: operations {sum(answers.values())}, acknowledged (2xx) {answers[200]}, "
        f"lost -, duplicated -, 5xx {answers[500]}, faults injected 0; answers {dict(answers)}"
    )
    assert answers[200] > scenarios  # the links led on: steps beyond each scenario's first
