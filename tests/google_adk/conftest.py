"""Where LedgerSessionService keeps its sessions in these tests: an in-process Ledger on
SQLite or PostgreSQL, or a real `session-ledger serve` process on either (over HTTP).

`adk` gives a target: `service()` makes a LedgerSessionService there, `ledger` is an
in-process Ledger on the same store and tenant (for the audit trail and replay), and
`app` is an ADK app name of the test's own, so tests sharing a store never meet.
"""

from __future__ import annotations

import contextlib
import secrets
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.client import LedgerClient
from session_ledger.api.google_adk import LedgerSessionService
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.conftest import fresh_postgres_database, make_ledger, make_settings
from tests.e2e.conftest import Server, server_env


@dataclass
class Target:
    name: str
    service: Callable[[], LedgerSessionService]
    ledger: Ledger  # the same store and tenant, in this process
    tenant: str
    database_url: str
    app: str
    remote: bool

    def key(self, user: str, session_id: str) -> str:
        """The ledger key of one of the test's ADK sessions."""
        return f"adk/{self.app}/{user}/{session_id}"


@dataclass
class Served:
    base_url: str
    agent_key: str
    database_url: str
    ledger: Ledger


@pytest.fixture(scope="session")
def adk_servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[[str], Served]]:
    """A `serve` process per store, started when first asked for (with an agent key)."""
    started: dict[str, Served] = {}
    with contextlib.ExitStack() as stack:

        def serve(store: str) -> Served:
            if store not in started:
                if store == "sqlite":
                    url = f"sqlite:///{tmp_path_factory.mktemp('adk') / 'ledger.db'}"
                else:
                    url = stack.enter_context(fresh_postgres_database("ledger_adk"))
                admin_key = "sl_test_" + secrets.token_urlsafe(24)
                # (limits above the e2e defaults: ADK events carry whole tool results)
                env = server_env(
                    url, LEDGER_BOOTSTRAP_KEY=admin_key, LEDGER_MAX_MESSAGE_BYTES=str(64 * 1024)
                )
                server = Server(env).start()
                stack.callback(server.stop)
                with LedgerClient(server.base_url, admin_key) as admin:
                    agent = admin.create_key("agent", name="adk agent").key
                ledger = open_ledger(Settings(database_url=url, tokenizer="whitespace"))
                stack.callback(ledger.close)
                started[store] = Served(server.base_url, agent, url, ledger)
            return started[store]

        yield serve


TARGETS = [
    pytest.param("local-sqlite", id="local-sqlite"),
    pytest.param("local-postgres", id="local-postgres", marks=pytest.mark.postgres),
    pytest.param("remote-sqlite", id="remote-sqlite"),
    pytest.param("remote-postgres", id="remote-postgres", marks=pytest.mark.postgres),
]


@pytest.fixture(params=TARGETS)
def adk(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Target]:
    kind, store = request.param.split("-")
    app = f"app-{uuid.uuid4().hex[:10]}"
    if kind == "local":
        settings = make_settings(store, tmp_path)
        ledger = make_ledger(settings)
        tenant = settings.default_tenant
        yield Target(
            request.param, lambda: LedgerSessionService(ledger=ledger, actor="adk-test"),
            ledger, tenant, settings.database_url, app, remote=False,
        )  # fmt: skip
        ledger.close()
        return
    served = request.getfixturevalue("adk_servers")(store)
    yield Target(
        request.param,
        lambda: LedgerSessionService(url=served.base_url, api_key=served.agent_key),
        served.ledger, served.ledger.default_tenant, served.database_url, app, remote=True,
    )  # fmt: skip
