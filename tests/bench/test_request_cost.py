"""The request-cost diagnostic (bench/diagnostics/request_cost.py) drives the real app
and charges each request's time to its parts without losing or double-counting any."""

from __future__ import annotations

from pathlib import Path

import fastapi.routing
import pytest

from bench.diagnostics.request_cost import run
from tests.conftest import postgres_server_url

pytestmark = pytest.mark.bench


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_each_request_is_timed_whole_and_in_its_parts(store: str, tmp_path: Path) -> None:
    if store == "postgres":
        postgres_server_url()  # skips loudly, or fails where PostgreSQL is required
    solve = fastapi.routing.solve_dependencies
    found = run(store, tmp_path, rounds=2, batch=5)
    assert fastapi.routing.solve_dependencies is solve  # the timers are gone again
    assert set(found) == {"GET /context", "POST /messages"}
    for parts in found.values():
        assert parts["dependencies"] > 0 and parts["route"] > 0
        assert parts["dependencies"] + parts["route"] < parts["total"]
