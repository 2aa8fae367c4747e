"""Fixtures shared by every test: ledgers on each store, PostgreSQL discovery."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.write_turns import lock_file_of
from tests.postgres_pair import PostgresPair, start_pair_or_skip

DEFAULT_POSTGRES_URL = "postgresql://postgres@127.0.0.1:5432/test"
STORES = ("memory", "sqlite", "postgres")


def postgres_server_url() -> str:
    """The test PostgreSQL server; skips loudly when unreachable, fails when required."""
    url = os.environ.get("LEDGER_TEST_POSTGRES_URL", DEFAULT_POSTGRES_URL)
    try:
        psycopg.connect(url, connect_timeout=3).close()
    except psycopg.Error as e:
        reason = f"PostgreSQL unreachable at {url}: {e}".strip()
        if os.environ.get("LEDGER_REQUIRE_POSTGRES") == "1":
            pytest.fail(f"{reason} (LEDGER_REQUIRE_POSTGRES=1)")
        pytest.skip(f"SKIPPING POSTGRES TESTS: {reason}; set LEDGER_REQUIRE_POSTGRES=1 to fail")
    return url


@contextmanager
def fresh_postgres_database(prefix: str = "ledger_test") -> Iterator[str]:
    """A new, empty database on the test server, dropped afterwards: its URL."""
    server = postgres_server_url()
    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlsplit(server)._replace(path=f"/{name}").geturl()
    finally:
        with psycopg.connect(server, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


_session_database: ExitStack | None = None
_session_database_url: str | None = None


def postgres_url() -> str:
    """This test run's own database (made on first use, dropped at the end), so runs
    never see each other's rows or an older schema."""
    global _session_database, _session_database_url
    if _session_database_url is None:
        _session_database = ExitStack()
        _session_database_url = _session_database.enter_context(fresh_postgres_database())
    return _session_database_url


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    if _session_database is not None:
        _session_database.close()


@pytest.fixture
def fresh_postgres_url() -> Iterator[str]:
    """A database of the test's own, for tests that read the whole store."""
    with fresh_postgres_database() as url:
        yield url


def store_url(store: str, tmp_path: Path) -> str:
    if store == "memory":
        return "memory://"
    if store == "sqlite":
        return f"sqlite:///{tmp_path / 'ledger.db'}"
    return postgres_url()


def make_settings(store: str, tmp_path: Path, **overrides: object) -> Settings:
    """Settings for a test ledger: whitespace tokens, a fresh tenant per test."""
    values: dict[str, object] = {
        "database_url": store_url(store, tmp_path),
        "tokenizer": "whitespace",
        "default_tenant": f"t-{uuid.uuid4().hex[:12]}",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture
def own_store_settings(store: str, tmp_path: Path, request: pytest.FixtureRequest) -> Settings:
    """Settings on a store of the test's own (on PostgreSQL a database of its own), for
    tests that read the whole store or alter its tables."""
    settings = make_settings(store, tmp_path)
    if store == "postgres":
        settings.database_url = request.getfixturevalue("fresh_postgres_url")
    return settings


def make_ledger(settings: Settings) -> Ledger:
    migrate(settings)
    return open_ledger(settings)


@pytest.fixture(params=STORES)
def store(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def ledger(store: str, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger on each store in turn (the contract suite runs unchanged on all three)."""
    instance = make_ledger(make_settings(store, tmp_path))
    yield instance
    instance.close()


@pytest.fixture(scope="session")
def postgres_pair() -> Iterator[PostgresPair]:
    """A PostgreSQL primary and a streaming standby of it, the tests' own (read replicas),
    with the ledger's tables; stopped and removed at the end."""
    pair = start_pair_or_skip()
    try:
        migrate(Settings(database_url=pair.primary_url, tokenizer="whitespace"))
        yield pair
    finally:
        pair.close()


@asynccontextmanager
async def ticking(every: float) -> AsyncIterator[list[int]]:
    """A task on the running loop that ticks every `every` seconds while the block runs:
    the ticks show the loop served other tasks meanwhile (a blocking call lets it tick
    about once)."""
    ticks: list[int] = []

    async def tick() -> None:
        while True:
            ticks.append(1)
            await asyncio.sleep(every)

    task = asyncio.create_task(tick())
    await asyncio.sleep(0)
    try:
        yield ticks
    finally:
        task.cancel()


HOLDER = """
import fcntl, os, sys
fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT, 0o600)
fcntl.flock(fd, fcntl.LOCK_EX)
print("held", flush=True)
sys.stdin.readline()
"""


@contextmanager
def turn_held(db_path: Path) -> Iterator[threading.Event]:
    """Another process holds the writers' turn of the SQLite file `db_path`
    (projections/write_turns.py), as another server worker's commit does, until the event
    yielded is set or the block ends."""
    process = subprocess.Popen(
        [sys.executable, "-c", HOLDER, lock_file_of(str(db_path))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,  # lines flushed
    )  # fmt: skip
    assert process.stdin is not None and process.stdout is not None
    assert process.stdout.readline() == "held\n"
    let_go = threading.Event()
    waiter = threading.Thread(target=lambda: let_go.wait() and process.stdin.write("go\n"))
    try:
        waiter.start()
        yield let_go
    finally:
        let_go.set()
        waiter.join()
        process.stdin.close()
        process.wait(10)
