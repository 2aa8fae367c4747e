"""The request-cost diagnostic (bench/diagnostics/request_cost.py) drives the real app
and charges each request's time to its parts without losing or double-counting any."""

from __future__ import annotations

from pathlib import Path

import fastapi.routing
import pytest

from bench.diagnostics.request_cost import run

pytestmark = pytest.mark.bench


def test_each_request_is_timed_whole_and_in_its_parts(tmp_path: Path) -> None:
    solve = fastapi.routing.solve_dependencies
    found = run(tmp_path, rounds=2, batch=5)
    assert fastapi.routing.solve_dependencies is solve  # the timers are gone again
    assert set(found) == {"GET /context", "POST /messages"}
    for parts in found.values():
        assert parts["dependencies"] > 0 and parts["route"] > 0
        assert parts["dependencies"] + parts["route"] < parts["total"]
