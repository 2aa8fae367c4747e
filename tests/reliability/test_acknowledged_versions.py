"""Every acknowledged version holds the write it acknowledged: eight clients, keyed and
unkeyed, write to two shared sessions through one or two API processes (whose cached
state of a session is often stale) while a process is SIGKILLed and started again; then
the event at each version a 200 named must be that very write (acknowledged.py).

`make test` runs each case short (a few hundred acknowledgements); `make
test-reliability` runs them long (tens of thousands in all)."""

from __future__ import annotations

import contextlib
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import pytest

from tests.conftest import fresh_postgres_database
from tests.e2e.conftest import Server, server_env

from .acknowledged import VersionedWriters

# A snapshot every few events rather than every 200: a write that takes one does a store
# round trip between its commit and its answer, the window in which another writer of
# its process once changed the state it answered from (write_loop.py). More windows, the
# same code.
SNAPSHOT_INTERVAL = "5"
RUN_LIMIT_SECONDS = 600  # a bound on a run, whatever happens; never asserted


@dataclass(frozen=True)
class Run:
    acknowledgements: int  # the run ends once this many writes were acknowledged
    kills: int  # SIGKILLs spread over it (each followed by a start of the same process)


SHORT = Run(acknowledgements=300, kills=2)
LONG = Run(acknowledgements=12_000, kills=20)


@contextlib.contextmanager
def servers_on(store: str, tmp_dir: str, processes: int) -> Iterator[tuple[list[Server], str]]:
    """`processes` API processes on one new store, and the admin key."""
    with contextlib.ExitStack() as stack:
        if store == "sqlite":
            url = f"sqlite:///{tmp_dir}/ledger.db"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_versions"))
        api_key = "sl_versions_" + secrets.token_urlsafe(18)
        servers = []
        for _ in range(processes):  # one after another: the first makes the tables
            env = server_env(url, LEDGER_BOOTSTRAP_KEY=api_key, LEDGER_ACCESS_LOG="false",
                             LEDGER_SNAPSHOT_INTERVAL=SNAPSHOT_INTERVAL)  # fmt: skip
            server = Server(env).start()
            stack.callback(server.stop)
            servers.append(server)
        yield servers, api_key


def kill_and_restart(server: Server) -> None:
    """SIGKILL the process (no shutdown of any kind), then start it again on its port."""
    assert server.process is not None
    server.process.kill()
    server.process.wait()
    server.stop()  # keeps what it printed
    server.start()


def run_with_kills(store: str, tmp_dir: str, processes: int, run: Run) -> None:
    with servers_on(store, tmp_dir, processes) as (servers, api_key):
        writers = VersionedWriters([s.base_url for s in servers], api_key)
        stop = threading.Event()
        clients = threading.Thread(target=writers.run, args=(stop.is_set,))
        clients.start()
        kills = 0
        limit = time.monotonic() + RUN_LIMIT_SECONDS
        try:
            while time.monotonic() < limit:
                if kills == run.kills and writers.acknowledged >= run.acknowledgements:
                    break
                due = run.acknowledgements * (kills + 1) // (run.kills + 1)
                if kills < run.kills and writers.acknowledged >= due:
                    kill_and_restart(servers[kills % len(servers)])
                    kills += 1
                time.sleep(0.05)
        finally:
            stop.set()
            clients.join()
        try:
            report = writers.check(servers[0].base_url)
        except Exception as exc:
            logs = "".join(s.stop() for s in servers)
            raise AssertionError(f"{exc}\nserver output:\n{logs[-20_000:]}") from exc
    name = f"acknowledged versions ({store}, {processes} process{'es' * (processes > 1)})"
    print(report.line(f"{name}, kills {kills}"))
    assert kills == run.kills, "the run ended before every kill was made"
    assert report.acknowledged >= run.acknowledgements
    assert report.keyed and report.acknowledged > report.keyed  # both kinds acknowledged
    assert report.mismatched == [], "\n".join(report.mismatched[:20])
    assert report.lost == 0
    assert report.duplicated == 0
    assert not [a for a in report.answers if a.startswith("500")], report.answers


STORES = ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]


@pytest.mark.slow
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("store", STORES)
def test_every_acknowledged_version_holds_its_write_short_run(
    store: str, processes: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_with_kills(store, str(tmp_path_factory.mktemp("versions")), processes, SHORT)


@pytest.mark.long_run
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("processes", [1, 2])
@pytest.mark.parametrize("store", STORES)
def test_every_acknowledged_version_holds_its_write_long_run(
    store: str, processes: int, tmp_path_factory: pytest.TempPathFactory
) -> None:
    run_with_kills(store, str(tmp_path_factory.mktemp("versions")), processes, LONG)
