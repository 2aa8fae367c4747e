"""Where the `LedgerSession`s of these tests live: an in-process Ledger on SQLite or
PostgreSQL, or a real `serve` process on each (the e2e servers, one per store, shared by
the run; each test uses fresh session keys).

`where` gives the constructor keywords of one of the four, and an in-process Ledger on
the same store and tenant to read the audit trail, past versions and the export with.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from session_ledger.api.openai_agents import LedgerSession
from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Deployment

deployment = e2e.deployment  # a real `serve` process per store, with API keys
server_ledgers = e2e.server_ledgers


@dataclass
class Where:
    """A session's target: constructor keywords, and a Ledger on the same store and tenant."""

    name: str
    kwargs: dict[str, Any]
    ledger: Ledger
    prefix: str  # every session key a test makes starts with it
    # The keywords another process gives LedgerSession to reach the same sessions.
    process_kwargs: dict[str, Any]

    def session(self, name: str, **kwargs: Any) -> LedgerSession:
        return LedgerSession(name, key=self.prefix + name, **self.kwargs, **kwargs)


@pytest.hookimpl(tryfirst=True)
def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Tests that take `where` run in process on each store, then against a server on each."""
    e2e.parametrize_where(metafunc, [
        pytest.param("local", "sqlite", id="local-sqlite"),
        pytest.param("local", "postgres", id="local-postgres", marks=pytest.mark.postgres),
    ])  # fmt: skip


@pytest.fixture
def where(
    request: pytest.FixtureRequest, target: str, deployment: Deployment, tmp_path: Path
) -> Iterator[Where]:
    prefix = f"oa/{uuid.uuid4().hex[:10]}/"
    store = deployment.store
    if target == "local":
        settings = make_settings(store, tmp_path)
        ledger = make_ledger(settings)
        elsewhere = {"url": settings.database_url, "tenant": settings.default_tenant}
        yield Where(f"local-{store}", {"ledger": ledger}, ledger, prefix, elsewhere)
        ledger.close()
        return
    opened: dict[str, Ledger] = request.getfixturevalue("server_ledgers")
    kwargs = {"url": deployment.base_url, "api_key": deployment.keys["a_agent"]}
    yield Where(f"remote-{store}", kwargs, e2e.server_ledger(deployment, opened), prefix, kwargs)
