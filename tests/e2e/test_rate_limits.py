"""Rate limits and quotas through two real `session-ledger serve` processes on one store:
they share one budget per key and per tenant; refusals are 429 with Retry-After in the
API's error shape; health, readiness and metrics are never limited.

The limits refill one request every 10,000 seconds, so what a test sees does not depend
on how fast it runs: each test uses tenants and keys of its own."""

from __future__ import annotations

import contextlib
import json
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import pytest

from session_ledger.api.client_requests import session_path
from tests.conftest import fresh_postgres_database

from .conftest import Server, run_cli, server_env

KEY_BURST, TENANT_BURST, KEY_BYTES, SESSIONS = 10, 25, 4000, 3
LIMITS = {
    "LEDGER_RATE_LIMIT_KEY_PER_SECOND": "0.0001",
    "LEDGER_RATE_LIMIT_KEY_BURST": str(KEY_BURST),
    "LEDGER_RATE_LIMIT_TENANT_PER_SECOND": "0.0001",
    "LEDGER_RATE_LIMIT_TENANT_BURST": str(TENANT_BURST),
    "LEDGER_QUOTA_KEY_WRITE_BYTES_PER_DAY": str(KEY_BYTES),
    "LEDGER_QUOTA_TENANT_WRITE_BYTES_PER_DAY": "none",
    "LEDGER_QUOTA_TENANT_SESSIONS": str(SESSIONS),
}


@dataclass
class Pair:
    """Two servers on one store."""

    servers: tuple[Server, Server]

    def keys(self, tenant: str, count: int = 1) -> list[str]:
        """Fresh agent keys of `tenant`, made with the CLI (no request spends a budget)."""

        def create(_: int) -> str:
            done = run_cli(self.servers[0].env, "keys", "create", "--tenant", tenant)
            assert done.returncode == 0, done.stderr
            return done.stdout.split("key: ")[1].split()[0]

        with ThreadPoolExecutor(count) as pool:
            return list(pool.map(create, range(count)))

    def client(self, n: int, key: str) -> httpx.Client:
        return httpx.Client(base_url=self.servers[n % 2].base_url, timeout=60,
                            headers={"Authorization": f"Bearer {key}"})  # fmt: skip


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def pair(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Pair]:
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('limits') / 'ledger.db'}"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_limits_e2e"))
        first = Server(server_env(url, **LIMITS)).start()
        stack.callback(first.stop)
        second = Server(server_env(url, **LIMITS)).start()
        stack.callback(second.stop)
        yield Pair((first, second))


def tenant() -> str:
    return f"t-{uuid.uuid4().hex[:8]}"


def statuses(pair: Pair, key: str, requests: int) -> list[int]:
    """`requests` reads by one key, alternating between the two servers."""
    answers = []
    for n in range(requests):
        with pair.client(n, key) as http:
            answers.append(http.get("/v1/sessions", params={"limit": 1}).status_code)
    return answers


def test_two_servers_share_one_budget_per_key(pair: Pair) -> None:
    (key,) = pair.keys(tenant())
    answers = statuses(pair, key, 3 * KEY_BURST)
    assert answers.count(200) == KEY_BURST and answers.count(429) == 2 * KEY_BURST
    with pair.client(1, key) as http:
        refused = http.get("/v1/sessions")
    assert refused.status_code == 429
    assert int(refused.headers["Retry-After"]) >= 1
    error = refused.json()["error"]
    assert error["code"] == "rate_limited" and error["message"].startswith("API key ")
    assert error["details"]["limit"] == "requests:key"


def test_a_tenant_budget_spans_its_keys_and_other_tenants_keep_theirs(pair: Pair) -> None:
    keys = pair.keys(tenant(), 3)
    admitted = [statuses(pair, key, KEY_BURST + 5).count(200) for key in keys]
    # Each key's refusals spent nothing of the tenant's budget.
    assert admitted == [KEY_BURST, KEY_BURST, TENANT_BURST - 2 * KEY_BURST]
    with pair.client(0, keys[2]) as http:
        assert http.get("/v1/sessions").json()["error"]["details"]["limit"] == "requests:tenant"
    (other,) = pair.keys(tenant())
    assert statuses(pair, other, 2) == [200, 200]


def test_health_readiness_and_metrics_are_never_limited(pair: Pair) -> None:
    (key,) = pair.keys(tenant())
    statuses(pair, key, KEY_BURST + 1)
    for n in range(2 * KEY_BURST):
        with pair.client(n, key) as http:
            for path in ("/healthz", "/readyz", "/metrics"):
                assert http.get(path).status_code == 200, path


def put(http: httpx.Client, session: str, body: bytes, method: str = "POST") -> httpx.Response:
    return http.request(method, session_path(session, "/messages"), content=body,
                        headers={"Content-Type": "application/json"})  # fmt: skip


def body_of(size: int) -> bytes:
    """A one-message write whose body is exactly `size` bytes."""
    empty = json.dumps({"messages": [{"role": "user", "content": ""}]})
    return empty.replace('""', json.dumps("x" * (size - len(empty)))).encode()


def test_write_bytes_a_day_per_key(pair: Pair) -> None:
    (key,) = pair.keys(tenant())
    answers = []
    for n in range(5):
        with pair.client(n, key) as http:
            answers.append(put(http, "bytes", body_of(KEY_BYTES // 4)))
    assert [a.status_code for a in answers] == [200, 200, 200, 200, 429]
    assert answers[4].json()["error"]["code"] == "quota_exceeded"
    assert int(answers[4].headers["Retry-After"]) > 3600  # a day's quota refills slowly
    with pair.client(0, key) as http:
        assert http.get(session_path("bytes")).json()["message_count"] == 4  # none stored
        too_large = put(http, "bytes", body_of(KEY_BYTES + 1))
    assert too_large.status_code == 413
    assert too_large.json()["error"]["code"] == "payload_too_large"


def test_sessions_a_tenant_may_hold(pair: Pair) -> None:
    (key,) = pair.keys(tenant())
    with pair.client(0, key) as http:
        # A write refused for its own reasons creates nothing and counts nothing.
        assert put(http, "s0", b'{"messages": [{"role": "nobody"}]}').status_code == 422
    made = []
    for n, session in enumerate(["s1", "s2", "s3", "s4"]):
        with pair.client(n, key) as http:
            made.append(put(http, session, body_of(60)))
    assert [a.status_code for a in made] == [200, 200, 200, 429]
    error = made[3].json()["error"]
    assert error["code"] == "quota_exceeded" and "quota of 3 sessions" in error["message"]
    assert made[3].headers["Retry-After"] == "3600"
    with pair.client(1, key) as http:
        assert put(http, "s5", body_of(60), method="PUT").status_code == 429
        assert put(http, "s1", body_of(60), method="PUT").status_code == 200  # exists
        assert http.get(session_path("s4")).status_code == 404  # nothing stored
        # Opening a stream creates its session too: counted the same way.
        opened = http.post(session_path("s6", "/streams"), json={"role": "assistant"})
        assert (opened.status_code, opened.json()["error"]["code"]) == (429, "quota_exceeded")
        assert http.get(session_path("s6")).status_code == 404  # the key's 10th request


@pytest.mark.parametrize(
    ("name", "value"),
    [("LEDGER_RATE_LIMIT_TENANT_BURST", "0"), ("LEDGER_RATE_LIMIT_KEY_PER_SECOND", "-3"),
     ("LEDGER_QUOTA_TENANT_SESSIONS", "lots")],
)  # fmt: skip
def test_bad_limit_settings_stop_the_commands_with_a_message(name: str, value: str) -> None:
    done = run_cli(server_env("memory://", **{name: value}), "serve")
    assert done.returncode == 2
    assert done.stderr.startswith("error: invalid settings:"), done.stderr
    assert "Traceback" not in done.stderr
