"""Rate limits and quotas, driven by a clock the test moves: bursts, refill, Retry-After,
all-or-nothing charging, limits that are off, and settings that are refused."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Sequence

import httpx
import pytest
from pydantic import ValidationError

from session_ledger.api.app import create_app
from session_ledger.api.auth import Principal
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.ratelimit import Limiter
from session_ledger.api.ratelimit_budget import DAY, QuotaExceeded, RateLimited
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import PayloadTooLarge
from session_ledger.projections.rate_limit_store import Bucket, MemoryLimitStore

OFF = {
    "rate_limit_key_per_second": 0, "rate_limit_tenant_per_second": 0,
    "quota_key_write_bytes_per_day": 0, "quota_tenant_write_bytes_per_day": 0,
    "quota_tenant_sessions": 0,
}  # fmt: skip
AGENT = Principal(key_id="k1", tenant="acme", role="agent")
OTHER_KEY = Principal(key_id="k2", tenant="acme", role="agent")


class Clock:
    START = 1_000_000.0

    def __init__(self) -> None:
        self.now = self.START

    def __call__(self) -> float:
        return self.now


class CountingStore(MemoryLimitStore):
    """The memory store, counting how often a request asks it."""

    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        self.asked += 1
        return super().take(buckets, now)


def limiter(clock: Clock, **limits: float) -> tuple[Limiter, CountingStore]:
    store = CountingStore()
    return Limiter(Settings(database_url="memory://", **{**OFF, **limits}), store, clock), store


def admitted(limits: Limiter, principal: Principal, requests: int, size: int = 0) -> int:
    count = 0
    for _ in range(requests):
        try:
            limits.admit(principal, size)
            count += 1
        except (RateLimited, QuotaExceeded):
            pass
    return count


def test_a_key_gets_its_burst_then_429_with_the_time_to_wait() -> None:
    clock = Clock()
    limits, _ = limiter(clock, rate_limit_key_per_second=10, rate_limit_key_burst=5)
    assert admitted(limits, AGENT, 20) == 5
    with pytest.raises(RateLimited) as refused:
        limits.admit(AGENT, 0)
    assert refused.value.retry_after == pytest.approx(0.1)
    assert refused.value.retry_after_header == "1"  # whole seconds, rounded up
    assert refused.value.limit == "requests:key"
    assert "API key k1" in str(refused.value) and "10 requests a second" in str(refused.value)
    clock.now += 0.1  # one request's worth of refill
    assert admitted(limits, AGENT, 5) == 1
    clock.now += 60  # refills to the burst, never beyond
    assert admitted(limits, AGENT, 20) == 5


def test_a_process_refuses_again_without_asking_the_store_until_the_wait_is_over() -> None:
    clock = Clock()
    limits, store = limiter(clock, rate_limit_key_per_second=10, rate_limit_key_burst=5)
    assert admitted(limits, AGENT, 6) == 5 and store.asked == 6
    assert admitted(limits, AGENT, 100) == 0 and store.asked == 6  # refused from memory
    with pytest.raises(RateLimited) as refused:
        limits.admit(AGENT, 0)
    assert refused.value.retry_after == pytest.approx(0.1)  # the same wait as the store's
    assert admitted(limits, OTHER_KEY, 1) == 1 and store.asked == 7
    clock.now += 0.1
    assert admitted(limits, AGENT, 2) == 1 and store.asked == 9


def test_failed_authentications_are_limited_per_client_address() -> None:
    clock = Clock()
    limits, store = limiter(
        clock, auth_failures_per_second=1, auth_failures_burst=3, rate_limit_lease=0
    )
    for _ in range(3):
        limits.refuse_known_failures("10.0.0.1")
        limits.admit_failure("10.0.0.1")
    with pytest.raises(RateLimited) as refused:
        limits.admit_failure("10.0.0.1")
    assert refused.value.limit == "auth_failures:address"
    assert refused.value.retry_after == pytest.approx(1)
    assert "client address 10.0.0.1" in str(refused.value)
    asked = store.asked
    with pytest.raises(RateLimited):  # before its key is looked up, from memory
        limits.refuse_known_failures("10.0.0.1")
    assert store.asked == asked
    limits.refuse_known_failures("10.0.0.2")  # another address keeps its own budget
    limits.admit_failure("10.0.0.2")
    clock.now += 1
    limits.refuse_known_failures("10.0.0.1")
    limits.admit_failure("10.0.0.1")


def test_failed_authentications_are_not_limited_when_off() -> None:
    limits, store = limiter(Clock(), auth_failures_per_second=0)
    for _ in range(1000):
        limits.refuse_known_failures("10.0.0.1")
        assert limits.admit_failure_in_memory("10.0.0.1")
    assert store.asked == 0


def test_a_process_admits_from_its_leases_with_one_store_call_per_lease() -> None:
    """A lease is a tenth of a burst: 200 of the key's, 1,000 of the tenant's requests."""
    limits, store = limiter(
        Clock(), rate_limit_key_per_second=1000, rate_limit_key_burst=2000,
        rate_limit_tenant_per_second=5000, rate_limit_tenant_burst=10_000,
    )  # fmt: skip
    assert admitted(limits, AGENT, 1000) == 1000
    assert store.asked == 5  # both leases at the first request, the key's at 201, 401, ...
    assert store.take([Bucket("requests:key:k1", 1e-3, 2.0)], Clock.START) == [0.0]
    assert store.take([Bucket("requests:key:k1", 1.0, 2.0)], Clock.START)[0] > 0  # 1,000 left
    off, counted = limiter(Clock(), rate_limit_key_per_second=1000, rate_limit_key_burst=2000,
                           rate_limit_lease=0)  # fmt: skip
    assert admitted(off, AGENT, 100) == 100 and counted.asked == 100


def test_processes_leasing_from_one_store_admit_exactly_its_burst_then_refuse_in_memory() -> None:
    """Two limiters on one store, as two processes: leases of 2 of a burst of 20, the last
    units one by one; then the flood is refused without a store call."""
    clock, shared = Clock(), CountingStore()
    settings = Settings(database_url="memory://", **{**OFF, "rate_limit_key_per_second": 10,
                                                     "rate_limit_key_burst": 20})  # fmt: skip
    processes = [Limiter(settings, shared, clock) for _ in range(2)]
    assert sum(admitted(processes[n % 2], AGENT, 1) for n in range(60)) == 20
    asked = shared.asked
    assert asked < 20
    assert sum(admitted(processes[n % 2], AGENT, 1) for n in range(1000)) == 0
    assert shared.asked == asked
    assert processes[0].admit_in_memory(OTHER_KEY, 0) is False  # another key: no lease yet
    clock.now += 0.1  # one request's worth of refill, for whichever process asks first
    assert sum(admitted(processes[n % 2], AGENT, 1) for n in range(10)) == 1


def test_a_request_refused_by_its_key_gives_back_what_it_took_of_the_tenant_lease() -> None:
    limits, _ = limiter(
        Clock(), rate_limit_key_per_second=1, rate_limit_key_burst=1,
        rate_limit_tenant_per_second=1, rate_limit_tenant_burst=100,
    )  # fmt: skip
    assert admitted(limits, AGENT, 6) == 1  # 5 refused by the key, after the tenant's lease
    others = [Principal(f"k{n}", "acme", "agent") for n in range(100)]
    assert sum(admitted(limits, key, 1) for key in others) == 99  # the tenant's 100, exactly
    with pytest.raises(RateLimited, match="tenant 'acme'"):
        limits.admit(Principal("k-last", "acme", "agent"), 0)


def test_a_tenant_budget_spans_its_keys_and_a_refused_key_spends_none_of_it() -> None:
    clock = Clock()
    limits, _ = limiter(
        clock, rate_limit_key_per_second=1, rate_limit_key_burst=3,
        rate_limit_tenant_per_second=1, rate_limit_tenant_burst=5,
    )  # fmt: skip
    assert admitted(limits, AGENT, 50) == 3  # the key's own limit refused 47
    assert admitted(limits, OTHER_KEY, 50) == 2  # what the tenant has left: 5 - 3
    with pytest.raises(RateLimited) as refused:
        limits.admit(Principal("k3", "acme", "agent"), 0)
    assert refused.value.limit == "requests:tenant" and "tenant 'acme'" in str(refused.value)
    assert admitted(limits, Principal("k4", "other", "agent"), 3) == 3


def test_write_bytes_a_day_refill_over_the_day() -> None:
    clock = Clock()
    limits, _ = limiter(clock, quota_key_write_bytes_per_day=10_000)
    assert admitted(limits, AGENT, 10, size=3_000) == 3
    with pytest.raises(QuotaExceeded) as refused:
        limits.admit(AGENT, 3_000)
    assert refused.value.retry_after == pytest.approx(2_000 / 10_000 * DAY)
    assert "10000 write bytes a day" in str(refused.value)
    assert admitted(limits, AGENT, 10) == 10  # reads and empty writes cost no bytes
    clock.now += DAY / 2
    assert admitted(limits, AGENT, 10, size=3_000) == 2  # 1,000 left + 5,000 refilled


def test_a_write_larger_than_the_whole_quota_is_too_large_not_rate_limited() -> None:
    limits, _ = limiter(Clock(), quota_tenant_write_bytes_per_day=1_000)
    with pytest.raises(PayloadTooLarge, match="can never fit"):
        limits.admit(AGENT, 1_001)
    limits.admit(AGENT, 1_000)


def test_limits_of_zero_or_none_are_off() -> None:
    limits, store = limiter(Clock())
    assert admitted(limits, AGENT, 10_000, size=10**9) == 10_000
    assert store.asked == 0  # nothing asked of the store
    none = Settings(database_url="memory://", **dict.fromkeys(OFF, None))
    assert Limiter(none, MemoryLimitStore()).by_key == []
    assert none.quota_tenant_sessions == 0


def test_the_sessions_quota_counts_new_sessions_only_and_gives_back_failed_ones() -> None:
    settings = Settings(database_url="memory://", tokenizer="whitespace")
    ledger = open_ledger(settings)
    try:
        ledger.put("before limits", {"role": "user", "content": "hi"}, tenant="acme")
        limits, _ = limiter(Clock(), quota_tenant_sessions=3)
        assert limits.count_session(ledger, "acme", "before limits") is False  # exists
        assert limits.count_session(ledger, "acme", "a") is True  # 1 existing + 1
        limits.uncount_session("acme")  # the write failed: given back
        assert limits.count_session(ledger, "acme", "a") is True
        assert limits.count_session(ledger, "acme", "b") is True
        with pytest.raises(QuotaExceeded, match="quota of 3 sessions") as refused:
            limits.count_session(ledger, "acme", "c")
        assert refused.value.retry_after_header == "3600"
        assert limits.count_session(ledger, "other", "c") is True
    finally:
        ledger.close()


@pytest.mark.parametrize(
    "bad",
    [
        {"rate_limit_key_per_second": -1},
        {"rate_limit_tenant_per_second": "nan"},
        {"rate_limit_key_burst": 0},
        {"rate_limit_tenant_burst": 0},
        {"quota_key_write_bytes_per_day": -5},
        {"quota_tenant_sessions": "many"},
    ],
    ids=lambda bad: next(iter(bad)),
)
def test_bad_limit_settings_are_refused(bad: dict[str, object]) -> None:
    with pytest.raises(ValidationError):
        Settings(database_url="memory://", **bad)  # type: ignore[arg-type]


def test_a_burst_of_zero_is_fine_when_its_rate_is_off() -> None:
    settings = Settings(rate_limit_key_per_second=0, rate_limit_key_burst=0)
    assert settings.rate_limit_key_burst == 0


def test_every_route_but_health_is_limited() -> None:
    """Every operation of the OpenAPI document answers 429 to a key that spent its burst
    (before its inputs are checked), but health's: a router added later cannot slip past."""
    settings = Settings(
        database_url="memory://", rate_limit_key_per_second=1e-6, rate_limit_key_burst=1
    )
    ledger = open_ledger(settings)
    store = MemoryKeyStore()
    _, secret = store.create("acme", "admin")
    app = create_app(settings, ledger=ledger, key_store=store)

    async def answers() -> dict[str, int]:
        found = {}
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {secret}"}
        async with httpx.AsyncClient(transport=transport, base_url="http://ledger",
                                     headers=headers) as http:  # fmt: skip
            await http.get("/v1/keys")  # the key's one request
            for path, operations in app.openapi()["paths"].items():
                for method in operations:
                    url = re.sub(r"\{[^}]+\}", "1", path)
                    answer = await http.request(method.upper(), url)
                    found[f"{method.upper()} {path}"] = answer.status_code
        return found

    try:
        found = asyncio.run(answers())
    finally:
        ledger.close()
    assert {op: status for op, status in found.items() if status != 429} == {
        "GET /healthz": 200, "GET /readyz": 200, "GET /metrics": 200,
    }  # fmt: skip
    assert len(found) > 10


def test_the_document_names_the_key_exactly_where_one_is_needed() -> None:
    """An operation the API refuses without a key (401) names the bearer scheme in the
    OpenAPI document, and health's, which need none, do not: the limits authenticate
    from the request itself, so the document is told apart from the dependencies."""
    settings = Settings(database_url="memory://")
    ledger = open_ledger(settings)
    app = create_app(settings, ledger=ledger, key_store=MemoryKeyStore())
    document = app.openapi()
    assert document["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"

    async def answers() -> dict[str, tuple[int, bool]]:
        found = {}
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ledger") as http:
            for path, operations in document["paths"].items():
                for method, operation in operations.items():
                    answer = await http.request(method.upper(), re.sub(r"\{[^}]+\}", "1", path))
                    named = operation.get("security") == [{"HTTPBearer": []}]
                    found[f"{method.upper()} {path}"] = (answer.status_code, named)
        return found

    try:
        found = asyncio.run(answers())
    finally:
        ledger.close()
    assert {op: got for op, got in found.items() if got != (401, True)} == {
        "GET /healthz": (200, False), "GET /readyz": (200, False), "GET /metrics": (200, False),
    }  # fmt: skip
    assert len(found) > 10
