"""PostgreSQL unreachable, restarted, slow or silent under load: requests answer 503
store_unavailable with Retry-After while it is away, /readyz turns red and back green,
the service recovers by itself, and no acknowledged write is lost or applied twice."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import httpx
import psycopg
import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.durability import UnsafeDurability
from session_ledger.api.settings import Settings

from .conftest import Cluster, Service, database_on
from .workload import Tally, Workload

LONG_OUTAGE = pytest.param(10, id="long", marks=pytest.mark.long_run)
RECOVERY_PROBES = 240  # readyz probes, 0.25 s apart, before recovery counts as failed


@dataclass
class Probes:
    """What /readyz and a read answered while the store was away."""

    readyz: list[int] = field(default_factory=list)
    reads: list[tuple[int, str, str | None]] = field(default_factory=list)


def _probe(service: Service, probes: Probes) -> None:
    headers = {"Authorization": f"Bearer {service.api_key}"}
    for url in service.urls:
        with httpx.Client(base_url=url, headers=headers, timeout=120) as http:
            probes.readyz.append(http.get("/readyz").status_code)
            answer = http.get("/v1/sessions")
            code = answer.json()["error"]["code"] if answer.is_error else ""
            probes.reads.append((answer.status_code, code, answer.headers.get("Retry-After")))


def _wait_until_ready(service: Service) -> float:
    """Seconds until both processes' /readyz turn green again (a figure, not a check)."""
    started = time.monotonic()
    for _ in range(RECOVERY_PROBES):
        if all(httpx.get(f"{url}/readyz", timeout=60).status_code == 200 for url in service.urls):
            return time.monotonic() - started
        time.sleep(0.25)
    pytest.fail("the service did not turn ready again after the store came back")


def under_load(
    service: Service, name: str, away: Callable[[], None], back: Callable[[], None],
    seconds: float, probe: bool = True,
) -> tuple[Tally, Probes]:  # fmt: skip
    """Keyed writers run while the store is away for `seconds`; the tally afterwards.
    With `probe`, /readyz and a read are asked all the while."""
    workload = Workload(service.urls, service.api_key, keyed=True, threads=4, sessions=2)
    done = threading.Event()
    writers = threading.Thread(target=workload.run, kwargs={"until": done.is_set})
    writers.start()
    probes = Probes()
    try:
        time.sleep(1)
        away()
        went = time.monotonic()
        while time.monotonic() < went + seconds:
            if probe:
                _probe(service, probes)
            else:
                time.sleep(0.1)
        away_for = time.monotonic() - went
        back()
        ready_after = _wait_until_ready(service)
        time.sleep(1)  # writes go through again
    finally:
        done.set()
        writers.join()
    tally = workload.check(service.urls[0])
    tally.faults = dict(service.proxy.faults) or {name: 1}
    print(f"{tally.line(name)}; away {away_for:.1f} s, ready again {ready_after:.1f} s later")
    return tally, probes


def assert_outage_answers(tally: Tally, probes: Probes) -> None:
    assert 503 in probes.readyz
    assert any(status == 503 for status, _, _ in probes.reads)
    for status, code, retry_after in probes.reads:
        assert (status, code) in ((200, ""), (503, "store_unavailable")), (status, code)
        if status == 503:
            assert retry_after is not None and retry_after.isdigit()
    errors = {a for a in tally.answers if a.startswith("5")}
    assert errors <= {"503 store_unavailable"}, tally.answers
    assert tally.lost == 0
    assert tally.duplicated == 0


@pytest.mark.postgres
@pytest.mark.parametrize("seconds", [pytest.param(3, id="short"), LONG_OUTAGE])
def test_postgres_unreachable_under_load(shared_server_service: Service, seconds: int) -> None:
    proxy = shared_server_service.proxy
    tally, probes = under_load(shared_server_service, "unreachable", proxy.go_down,
                               proxy.come_back, seconds)  # fmt: skip
    assert tally.server_errors > 0
    assert_outage_answers(tally, probes)


@pytest.mark.parametrize("seconds", [pytest.param(3, id="short"), LONG_OUTAGE])
def test_postgres_restarted_under_load(
    own_cluster_service: Service, cluster: Cluster, seconds: int
) -> None:
    tally, probes = under_load(own_cluster_service, "restart", cluster.stop, cluster.start,
                               seconds)  # fmt: skip
    assert tally.server_errors > 0
    assert_outage_answers(tally, probes)


@pytest.mark.postgres
def test_slow_and_silent_store_loses_nothing(shared_server_service: Service) -> None:
    """A slow link (every message delayed) and a silent one (traffic held, then let go).

    Nothing is probed while the link is silent: a request that reached the database
    waits for its answer as long as the connection stays open (docs/reliability.md)."""
    proxy = shared_server_service.proxy

    def slow_then_silent() -> None:
        proxy.delay = 0.02
        time.sleep(1)
        proxy.blackhole(True)

    def back() -> None:
        proxy.blackhole(False)
        proxy.delay = 0.0

    tally, _ = under_load(shared_server_service, "delay+blackhole", slow_then_silent, back, 2,
                          probe=False)  # fmt: skip
    assert tally.lost == 0 and tally.duplicated == 0


@contextmanager
def server_setting(cluster: Cluster, name: str, value: str) -> Iterator[None]:
    with psycopg.connect(cluster.url, autocommit=True) as conn:
        conn.execute(f"ALTER SYSTEM SET {name} = {value}")
        conn.execute("SELECT pg_reload_conf()")
    try:
        yield
    finally:
        with psycopg.connect(cluster.url, autocommit=True) as conn:
            conn.execute(f"ALTER SYSTEM RESET {name}")
            conn.execute("SELECT pg_reload_conf()")


@pytest.mark.parametrize("name", ["fsync", "full_page_writes", "synchronous_commit"])
def test_a_server_that_can_lose_commits_is_refused(cluster: Cluster, name: str) -> None:
    with database_on(cluster.url) as url, server_setting(cluster, name, "off"):
        settings = Settings(database_url=url, tokenizer="whitespace")
        time.sleep(0.2)  # the reload reaches new sessions
        with pytest.raises(UnsafeDurability, match=f"{name}=off"):
            open_ledger(settings, create_tables=True)
        settings.allow_unsafe_durability = True
        open_ledger(settings, create_tables=True).close()
