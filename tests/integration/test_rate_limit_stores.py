"""The limit stores on every backend: one contract (the same verdicts as the arithmetic in
`ratelimit.settle`), all-or-nothing charging, and one budget shared by racing stores."""

from __future__ import annotations

from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from session_ledger.api.ratelimit import Bucket, LimitStore, open_limit_store
from session_ledger.domain.errors import StoreNotReady
from tests.conftest import fresh_postgres_database

POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)
NOW = 1_700_000_000.0


def _url(kind: str, tmp_path: Path, stack: ExitStack) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'limits.db'}"
    return stack.enter_context(fresh_postgres_database("ledger_limits"))


@pytest.fixture(params=["memory", "sqlite", POSTGRES])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[LimitStore]:
    with ExitStack() as stack:
        opened = open_limit_store(_url(request.param, tmp_path, stack))
        opened.migrate()
        yield opened
        opened.close()


@pytest.fixture(params=["sqlite", POSTGRES])
def shared_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store that several processes can share (not memory://)."""
    with ExitStack() as stack:
        yield _url(request.param, tmp_path, stack)


def rate(scope: str, per_second: float, burst: float, units: float = 1) -> Bucket:
    return Bucket(scope, units / per_second, burst / per_second)


def test_a_bucket_admits_its_burst_then_says_how_long_to_wait(store: LimitStore) -> None:
    bucket = rate("requests:key:a", per_second=4, burst=3)
    assert [store.take([bucket], NOW) for _ in range(3)] == [[0.0]] * 3
    assert store.take([bucket], NOW) == [pytest.approx(0.25)]
    assert store.take([bucket], NOW + 0.1) == [pytest.approx(0.15)]  # refusals cost nothing
    assert store.take([bucket], NOW + 0.25) == [0.0]
    assert store.take([bucket], NOW + 0.25) == [pytest.approx(0.25)]
    assert store.take([bucket], NOW + 100) == [0.0]  # full again, never fuller than the burst
    assert [store.take([bucket], NOW + 100)[0] for _ in range(3)] == [0.0, 0.0, 0.25]


def test_a_request_is_charged_to_all_its_buckets_or_to_none(store: LimitStore) -> None:
    key = rate("requests:key:k", per_second=1, burst=1)
    tenant = rate("requests:tenant:t", per_second=1, burst=2)
    assert store.take([key, tenant], NOW) == [0.0, 0.0]
    for _ in range(5):  # the key refuses: the tenant keeps what it has left
        assert store.take([key, tenant], NOW) == [pytest.approx(1.0), 0.0]
    other_key = rate("requests:key:other", per_second=1, burst=1)
    assert store.take([other_key, tenant], NOW) == [0.0, 0.0]
    assert store.take([rate("requests:key:third", 1, 1), tenant], NOW)[1] == pytest.approx(1.0)


def test_a_count_starts_from_what_exists_and_stops_at_its_limit(store: LimitStore) -> None:
    started = []

    def start() -> int:
        started.append(1)
        return 2

    assert store.count("sessions:acme", 4, start) is True
    assert store.count("sessions:acme", 4, start) is True
    assert store.count("sessions:acme", 4, start) is False
    store.uncount("sessions:acme")
    assert store.count("sessions:acme", 4, start) is True
    assert store.count("sessions:acme", 4, start) is False
    assert store.count("sessions:acme", 5, start) is True  # a raised quota lets one more in
    assert started == [1]


def test_stores_of_several_processes_share_one_budget(shared_url: str) -> None:
    stores = [open_limit_store(shared_url) for _ in range(4)]
    stores[0].migrate()
    bucket = rate("requests:tenant:shared", per_second=1e-6, burst=40)
    try:

        def take(n: int) -> int:
            return sum(stores[n % 4].take([bucket], NOW) == [0.0] for _ in range(25))

        with ThreadPoolExecutor(8) as pool:
            assert sum(pool.map(take, range(8))) == 40  # of 200, exactly the burst
    finally:
        for opened in stores:
            opened.close()


def test_a_store_not_migrated_is_not_ready(shared_url: str) -> None:
    store = open_limit_store(shared_url)
    try:
        with pytest.raises(StoreNotReady, match="migrate"):
            store.take([rate("requests:key:a", 1, 1)], NOW)
    finally:
        store.close()
