"""Real servers for the end-to-end tests: `session-ledger serve` in a child process.

One server per store (a SQLite file, a fresh PostgreSQL database), shared by the
session's tests; every test uses fresh session keys, and the tenants below:
  tenant A ("default"): the bootstrap admin, an agent, an auditor;
  tenant B: an agent and an admin, made with the CLI (`keys create --tenant`).
Limits are set low so the 413 paths are cheap to reach.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import IO, Any

import httpx
import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.client import LedgerClient
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.conftest import fresh_postgres_database

LIMITS = {
    "LEDGER_MAX_BODY_BYTES": str(256 * 1024),
    "LEDGER_MAX_MESSAGE_BYTES": str(16 * 1024),
    "LEDGER_MAX_MESSAGES_PER_WRITE": "50",
    "LEDGER_MAX_WRITE_BYTES": str(128 * 1024),
    "LEDGER_TOKENIZER": "whitespace",
}
CLI = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]
STARTUP_SECONDS = 60


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def run_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*CLI, *args], env=env, capture_output=True, text=True, timeout=120, check=False
    )


@dataclass
class Server:
    """A running `session-ledger serve` process."""

    env: dict[str, str]
    process: subprocess.Popen[str] | None = None
    log: IO[str] | None = None
    output: list[str] = field(default_factory=list)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.env['LEDGER_PORT']}"

    def start(self) -> Server:
        # A file, not a pipe: nobody reads a pipe while the server runs, and a full pipe
        # would block the server on its next access-log line.
        self.log = tempfile.TemporaryFile("w+", encoding="utf-8")  # noqa: SIM115
        self.process = subprocess.Popen(
            [*CLI, "serve"], env=self.env, stdout=self.log, stderr=subprocess.STDOUT, text=True
        )
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"server exited with {self.process.returncode}:\n{self.stop()}")
            try:
                if httpx.get(f"{self.base_url}/healthz", timeout=1).status_code == 200:
                    return self
            except httpx.TransportError:
                time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"server did not answer within {STARTUP_SECONDS}s")

    def stop(self) -> str:
        """Stop the server; returns what it printed."""
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        if self.log is not None:
            self.log.seek(0)
            self.output.append(self.log.read())
            self.log.close()
            self.log = None
        return "".join(self.output)


def server_env(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    return {**env, **LIMITS, "LEDGER_DATABASE_URL": database_url, "LEDGER_HOST": "127.0.0.1",
            "LEDGER_PORT": str(free_port()), **extra}  # fmt: skip


@dataclass
class Deployment:
    """A server and the API keys of the two tenants the tests use."""

    server: Server
    store: str
    keys: dict[str, str]
    key_ids: dict[str, str]

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def client(self, who: str) -> LedgerClient:
        return LedgerClient(self.base_url, self.keys[who], timeout=60)

    def raw(self, who: str | None = None) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[who]}"} if who else {}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60)


def _cli_key(env: dict[str, str], tenant: str, role: str) -> tuple[str, str]:
    done = run_cli(env, "keys", "create", "--tenant", tenant, "--role", role, "--name", role)
    assert done.returncode == 0, done.stderr
    fields = dict(line.split(": ", 1) for line in done.stdout.splitlines() if ": " in line)
    return fields["id"], fields["key"]


@pytest.fixture(
    scope="session", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def deployment(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Deployment]:
    """A running server on each store in turn, with keys for tenants A and B.

    Each setup gets a database of its own: pytest may tear a session fixture down and
    set it up again when it reorders parametrized tests, and a server bootstraps its
    admin key only into an empty key table."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('e2e') / 'ledger.db'}"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_e2e"))
        admin_key = "sl_test_" + secrets.token_urlsafe(24)
        server = Server(server_env(url, LEDGER_BOOTSTRAP_KEY=admin_key)).start()
        stack.callback(server.stop)
        keys, ids = {"a_admin": admin_key}, {}
        with LedgerClient(server.base_url, admin_key) as admin:
            for role in ("agent", "auditor"):
                created = admin.create_key(role, name=f"a {role}")
                keys[f"a_{role}"], ids[f"a_{role}"] = created.key, created.id
        for role in ("agent", "admin"):
            ids[f"b_{role}"], keys[f"b_{role}"] = _cli_key(server.env, "tenant-b", role)
        yield Deployment(server, request.param, keys, ids)


def parametrize_where(metafunc: pytest.Metafunc, local: list[Any]) -> None:
    """Tests that take `where` run in process (`local`: `pytest.param("local", store)`s),
    then against a server (the `deployment`) on each store: an adapter suite's targets."""
    if "where" in metafunc.fixturenames:
        # A parametrize mark (not a call): it takes precedence over `deployment`'s own params.
        metafunc.definition.add_marker(pytest.mark.parametrize(
            ("target", "deployment"),
            [
                *local,
                pytest.param("remote", "sqlite", id="remote-sqlite"),
                pytest.param("remote", "postgres", id="remote-postgres",
                             marks=pytest.mark.postgres),
            ],
            indirect=["deployment"],
            scope="session",  # one server per store for the whole run
        ))  # fmt: skip


@pytest.fixture(scope="session")
def server_ledgers() -> Iterator[dict[str, Ledger]]:
    """In-process Ledgers on the servers' own databases, one per database URL (to read
    what a server stored: its audit trail, past versions, the export)."""
    opened: dict[str, Ledger] = {}
    yield opened
    for ledger in opened.values():
        ledger.close()


def server_ledger(served: Deployment, opened: dict[str, Ledger]) -> Ledger:
    """The in-process Ledger on `served`'s database (opened once, kept in `opened`)."""
    url = served.server.env["LEDGER_DATABASE_URL"]
    if url not in opened:
        opened[url] = open_ledger(Settings(database_url=url, tokenizer="whitespace"))
    return opened[url]


@pytest.fixture
def session_key() -> str:
    """A fresh session key with the characters that need encoding: `/`, space, unicode."""
    return f"e2e/{uuid.uuid4().hex[:8]} chat/ünï ✓"
