"""Where the adapters' sessions live in these tests: an in-process Ledger, or a real
session-ledger server (the e2e fixtures: `serve` in a child process, SQLite and PostgreSQL).

`where` gives the keyword arguments that point an adapter at one or the other; each
test uses fresh session keys, so tests share a server without seeing each other.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Deployment

# The e2e fixtures, reused: a real `serve` process per store, with API keys.
deployment = e2e.deployment
server_ledgers = e2e.server_ledgers


@dataclass
class Where:
    """An adapter's target: constructor keywords, and a Ledger on the same store to audit."""

    name: str
    kwargs: dict[str, Any]
    open_ledger: Callable[[], Ledger]  # in-process, same store and tenant: for the audit trail
    prefix: str  # every session key a test makes starts with it

    @property
    def ledger(self) -> Ledger:
        return self.open_ledger()


@pytest.fixture
def local_ledger(tmp_path: Path) -> Iterator[Ledger]:
    """An in-process ledger (whitespace tokens, a fresh tenant)."""
    ledger = make_ledger(make_settings("memory", tmp_path))
    yield ledger
    ledger.close()


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that take `where` run in process once, then against a server on each store."""
    e2e.parametrize_where(metafunc, [pytest.param("local", "sqlite", id="local")])


@pytest.fixture
def where(
    request: pytest.FixtureRequest,
    target: str,
    local_ledger: Ledger,
    deployment: Deployment,
) -> Where:
    """The in-process ledger, or a server (the e2e `deployment`) with tenant A's agent key."""
    prefix = f"li/{uuid.uuid4().hex[:10]}/"
    if target == "local":
        return Where("local", {"ledger": local_ledger}, lambda: local_ledger, prefix)
    kwargs = {"url": deployment.base_url, "api_key": deployment.keys["a_agent"]}
    opened = request.getfixturevalue("server_ledgers")
    return Where(
        f"remote-{deployment.store}", kwargs, lambda: e2e.server_ledger(deployment, opened), prefix
    )
