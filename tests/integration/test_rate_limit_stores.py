"""The limit stores on every backend: one contract (the same verdicts as the arithmetic in
`rate_limit_store.settle`), all-or-nothing charging, and one budget shared by racing stores."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from session_ledger.api.auth import Principal
from session_ledger.api.bootstrap import open_limit_store
from session_ledger.api.ratelimit import Limiter
from session_ledger.api.ratelimit_budget import RateLimited
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import StoreNotReady
from session_ledger.projections.rate_limit_store import Bucket, LimitStore
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


class RoundTrips(LimitStore):
    """A real store, counting the calls a request makes of it."""

    def __init__(self, store: LimitStore) -> None:
        self.store, self.calls = store, 0

    def migrate(self) -> None:
        self.store.migrate()

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        self.calls += 1
        return self.store.take(buckets, now)

    def count(self, scope: str, limit: int, start: Callable[[], int]) -> bool:
        return self.store.count(scope, limit, start)

    def uncount(self, scope: str) -> None:
        self.store.uncount(scope)


def test_leasing_processes_admit_exactly_the_budget_with_few_round_trips(shared_url: str) -> None:
    """Two limiters with stores of their own on one database, as two API processes: a key
    with a burst of 400 (leases of 40), a tenant of 4,000 (leases of 400)."""
    settings = Settings(
        database_url=shared_url, rate_limit_key_per_second=1e-6, rate_limit_key_burst=400,
        rate_limit_tenant_per_second=1e-6, rate_limit_tenant_burst=4000,
        quota_key_write_bytes_per_day=0, quota_tenant_write_bytes_per_day=0,
    )  # fmt: skip
    stores = [RoundTrips(open_limit_store(shared_url)) for _ in range(2)]
    try:
        stores[0].migrate()
        processes = [Limiter(settings, store, lambda: NOW) for store in stores]
        principal = Principal(key_id="k", tenant="t", role="agent")
        verdicts = []
        for n in range(1000):
            try:
                processes[n % 2].admit(principal, 0)
                verdicts.append(True)
            except RateLimited:
                verdicts.append(False)
        assert verdicts.count(True) == 400
        # 10 key leases and 2 tenant leases, 2 refusals (lease, then the request alone)
        # per process; the other 588 refusals from memory.
        assert sum(store.calls for store in stores) <= 10 + 2 * 2
    finally:
        for store in stores:
            store.close()


@pytest.mark.postgres
def test_a_count_begun_by_another_process_meanwhile_is_not_a_refusal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two processes count the first session of a tenant at once: this one's UPDATE finds
    no row, the other then inserts it and commits, and this one's next statement sees it.
    The row is there, but the quota is far off: the count must go through."""
    with ExitStack() as stack:
        url = _url("postgres", tmp_path, stack)
        mine, other = open_limit_store(url), open_limit_store(url)
        stack.callback(mine.close)
        stack.callback(other.close)
        mine.migrate()
        opened = mine.connections.transaction  # type: ignore[attr-defined]

        class Interleaved:
            """The cursor of `mine`: the other process counts after its first UPDATE."""

            def __init__(self, cursor: object) -> None:
                self.cursor, self.done = cursor, False

            def execute(self, sql: str, params: Sequence[object] = ()) -> None:
                self.cursor.execute(sql, params)  # type: ignore[attr-defined]
                if sql.startswith("UPDATE") and not self.done:
                    self.done = True
                    assert other.count("sessions:acme", 1000, lambda: 0) is True

            def __getattr__(self, name: str) -> object:
                return getattr(self.cursor, name)

        @contextmanager
        def transaction(*args: object, **kwargs: object) -> Iterator[Interleaved]:
            with opened(*args, **kwargs) as cursor:
                yield Interleaved(cursor)

        monkeypatch.setattr(mine.connections, "transaction", transaction)  # type: ignore[attr-defined]
        assert mine.count("sessions:acme", 1000, lambda: 0) is True
        monkeypatch.undo()
        for _ in range(998):
            assert mine.count("sessions:acme", 1000, lambda: 0) is True
        assert mine.count("sessions:acme", 1000, lambda: 0) is False  # at the limit: 1,000


def test_on_sqlite_a_bucket_is_taken_while_the_ledgers_write_lock_is_held(
    tmp_path: Path,
) -> None:
    """The buckets live in a file of their own beside the ledger's: taking one does not
    wait for the ledger's write lock (a tenant's long write held every other tenant's
    requests there for seconds, until `LEDGER_LOCK_TIMEOUT_SECONDS` and a 503)."""
    db = tmp_path / "ledger.db"
    store = open_limit_store(f"sqlite:///{db}", lock_timeout=0.5)
    store.migrate()
    writer = sqlite3.connect(db, isolation_level=None)
    try:
        writer.execute("PRAGMA journal_mode = WAL")
        writer.execute("BEGIN IMMEDIATE")  # the ledger's write lock, held
        writer.execute("CREATE TABLE held (x)")
        bucket = rate("requests:key:a", per_second=1, burst=5)
        assert store.take([bucket], NOW) == [0.0]
        assert store.count("sessions:acme", 10, lambda: 0) is True
        writer.execute("ROLLBACK")
    finally:
        writer.close()
        store.close()
    assert (tmp_path / "ledger.db-limits").exists()
