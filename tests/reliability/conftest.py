"""Fixtures of the reliability runs: a fault proxy in front of PostgreSQL, a PostgreSQL
cluster of the tests' own (restartable: never the machine's shared server), and two
`session-ledger serve` processes on one database.

`make test` runs each test short; `make test-reliability` runs the `long_run` ones.
"""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from tests.conftest import fresh_postgres_database
from tests.e2e.conftest import Server, free_port, server_env

from .proxy import FaultProxy


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if "long_run" in (config.getoption("markexpr") or ""):
        return
    skip = pytest.mark.skip(reason="the long reliability run: make test-reliability")
    for item in items:
        if "long_run" in item.keywords:
            item.add_marker(skip)


@dataclass
class Cluster:
    """A PostgreSQL cluster in a temporary directory, on a port of its own."""

    bin: Path
    data: Path
    port: int
    as_postgres: list[str]

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def ctl(self, *args: str) -> None:
        options = f"-p {self.port} -k {self.data.parent} -c listen_addresses=127.0.0.1"
        subprocess.run(
            [*self.as_postgres, str(self.bin / "pg_ctl"), "-D", str(self.data), "-o", options,
             "-l", str(self.data.parent / "log"), "-w", "-t", "60", *args],
            check=True, capture_output=True, timeout=120,
        )  # fmt: skip

    def stop(self) -> None:
        self.ctl("stop", "-m", "fast")

    def start(self) -> None:
        self.ctl("start")


@pytest.fixture(scope="session")
def cluster() -> Iterator[Cluster]:
    """A throwaway cluster (initdb, pg_ctl), or a loud skip where none can be made."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    if not found:
        pytest.skip("SKIPPING: no initdb under /usr/lib/postgresql/*/bin for a cluster of our own")
    bin_dir = Path(found[-1]).parent
    as_postgres: list[str] = []
    root = Path(tempfile.mkdtemp(prefix="ledger-pg-"))
    if os.geteuid() == 0:  # PostgreSQL will not run as root
        as_postgres = ["runuser", "-u", "postgres", "--"]
        shutil.chown(root, "postgres")
    try:
        subprocess.run(
            [*as_postgres, str(bin_dir / "initdb"), "-D", str(root / "data"), "-A", "trust",
             "-U", "postgres", "--no-instructions"],
            check=True, capture_output=True, timeout=300,
        )  # fmt: skip
        made = Cluster(bin_dir, root / "data", free_port(), as_postgres)
        made.start()
    except (subprocess.CalledProcessError, OSError) as exc:
        shutil.rmtree(root, ignore_errors=True)
        pytest.skip(f"SKIPPING: cannot make a PostgreSQL cluster of our own: {exc}")
    try:
        yield made
    finally:
        subprocess.run(
            [*as_postgres, str(bin_dir / "pg_ctl"), "-D", str(made.data), "stop",
             "-m", "immediate"],
            capture_output=True, timeout=120, check=False,
        )  # fmt: skip
        shutil.rmtree(root, ignore_errors=True)


@contextmanager
def database_on(server_url: str) -> Iterator[str]:
    """A fresh database on the server at `server_url`, dropped afterwards: its URL."""
    name = f"ledger_rel_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server_url)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def through(proxy: FaultProxy, url: str) -> str:
    """`url` with the proxy's address."""
    parts = urlsplit(url)
    return parts._replace(netloc=f"{parts.username or 'postgres'}@127.0.0.1:{proxy.port}").geturl()


@dataclass
class Service:
    """Two API processes on one database (reached through `proxy`), and the admin key."""

    servers: list[Server]
    proxy: FaultProxy
    api_key: str

    @property
    def urls(self) -> list[str]:
        return [s.base_url for s in self.servers]


def start_service(stack: ExitStack, database_url: str, **settings: str) -> Service:
    upstream = urlsplit(database_url)
    proxy = FaultProxy(upstream.hostname or "127.0.0.1", upstream.port or 5432)
    stack.callback(proxy.close)
    api_key = "sl_reliability_" + uuid.uuid4().hex
    servers = []
    for _ in range(2):
        env = server_env(through(proxy, database_url), LEDGER_BOOTSTRAP_KEY=api_key,
                         LEDGER_ACCESS_LOG="false", **settings)  # fmt: skip
        server = Server(env).start()
        stack.callback(server.stop)
        servers.append(server)
    return Service(servers, proxy, api_key)


@pytest.fixture
def shared_server_service() -> Iterator[Service]:
    """The service on a fresh database of the shared test server, through the proxy."""
    with ExitStack() as stack:
        url = stack.enter_context(fresh_postgres_database("ledger_rel"))
        yield start_service(stack, url, LEDGER_STORE_WAIT_SECONDS="2")


@pytest.fixture
def own_cluster_service(cluster: Cluster) -> Iterator[Service]:
    """The service on a database of the tests' own cluster (which a test may restart)."""
    with ExitStack() as stack:
        url = stack.enter_context(database_on(cluster.url))
        yield start_service(stack, url, LEDGER_STORE_WAIT_SECONDS="2")
