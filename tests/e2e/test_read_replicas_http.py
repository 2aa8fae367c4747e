"""A server whose reads a real streaming standby serves (tests/postgres_pair.py): over
HTTP, a read with `min_version` never answers an older version while the standby lags,
the server's own writes are read back without one, and a stopped standby costs no error."""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator

import httpx
import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.client import LedgerClient, session_path
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.postgres_pair import PostgresPair

from .conftest import Server, _cli_key, server_env

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@contextlib.contextmanager
def replicated_server(pair: PostgresPair, workers: int) -> Iterator[Server]:
    """A server reading from the standby (checked every 0.1 s)."""
    env = server_env(
        pair.primary_url, LEDGER_WORKERS=str(workers),
        LEDGER_READ_DATABASE_URLS=pair.standby_url, LEDGER_REPLICA_CHECK_SECONDS="0.1",
        LEDGER_REPLICA_WAIT_MS="20", LEDGER_REPLICA_MAX_LAG_SECONDS="30",
    )  # fmt: skip
    server = Server(env).start()
    try:
        yield server
    finally:
        print(server.stop()[-3000:])


@pytest.fixture(scope="module")
def agent_key(postgres_pair: PostgresPair) -> str:
    return _cli_key(server_env(postgres_pair.primary_url), "default", "agent")[1]


@pytest.fixture(scope="module")
def api(postgres_pair: PostgresPair, agent_key: str) -> Iterator[LedgerClient]:
    """An agent's client of a one-worker server reading from the standby."""
    with replicated_server(postgres_pair, workers=1) as server, \
            LedgerClient(server.base_url, agent_key, timeout=60) as client:  # fmt: skip
        yield client


@pytest.fixture(scope="module")
def writer(postgres_pair: PostgresPair) -> Iterator[Ledger]:
    """Another process's writes, as far as the server knows: a ledger on the primary."""
    ledger = open_ledger(Settings(database_url=postgres_pair.primary_url, tokenizer="whitespace"))
    yield ledger
    ledger.close()


def message(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"message {i}"}


def test_min_version_over_http_never_reads_an_older_version_while_the_standby_lags(
    postgres_pair: PostgresPair, api: LedgerClient, writer: Ledger
) -> None:
    key = f"http-{uuid.uuid4().hex}"
    first = writer.put(key, message(0)).version
    deadline = time.monotonic() + 30
    while api.head(key, min_version=first).version != first or api.head(key).version != first:
        assert time.monotonic() < deadline
    postgres_pair.replay(paused=True)
    try:
        version = writer.put(key, message(1)).version
        # The control: the standby answers, and without a version it answers an older one.
        deadline = time.monotonic() + 30
        while api.head(key).version == version:  # (until the server's first check)
            assert time.monotonic() < deadline, "no read was served by the standby"
            time.sleep(0.05)
        stale = []
        for i in range(2, 1002):
            if i == 500:
                postgres_pair.replay(paused=False)
            version = writer.put(key, message(i)).version
            window = api.get(key, token_limit=30, min_version=version)
            if window[-1].content != f"message {i}":
                stale.append(i)
            if i % 10 == 0:
                assert api.head(key, min_version=version).version >= version
        assert stale == []
    finally:
        postgres_pair.replay(paused=False)


def test_the_servers_own_writes_are_read_back_while_the_standby_lags(
    postgres_pair: PostgresPair, api: LedgerClient
) -> None:
    key = f"http-{uuid.uuid4().hex}"
    api.put(key, message(0))
    postgres_pair.replay(paused=True)
    try:
        for i in range(1, 101):  # read with no version named (`api.http`): the server knows
            version = api.put(key, message(i)).version
            for suffix in ("", "/context"):
                answer = api.http.get(session_path(key, suffix))
                assert answer.headers["ETag"] == f'"{version}"'
    finally:
        postgres_pair.replay(paused=False)


def test_a_client_reads_its_own_writes_through_several_workers(
    postgres_pair: PostgresPair, agent_key: str
) -> None:
    """A write and the next read may meet different worker processes, each knowing its
    own writes only: the client names its last write's version on its reads."""
    # A connection of its own per request: a kept-alive one stays with one worker.
    fresh = httpx.HTTPTransport(limits=httpx.Limits(max_keepalive_connections=0))
    with (
        replicated_server(postgres_pair, workers=2) as server,
        LedgerClient(server.base_url, agent_key, timeout=60, transport=fresh) as client,
    ):
        key = f"http-{uuid.uuid4().hex}"
        client.put(key, message(0))
        postgres_pair.replay(paused=True)
        try:
            for i in range(1, 201):
                version = client.put(key, message(i)).version
                assert client.head(key).version == version
                assert client.get(key, token_limit=10)[-1].content == f"message {i}"
        finally:
            postgres_pair.replay(paused=False)


def test_a_stopped_standby_costs_no_error(
    postgres_pair: PostgresPair, api: LedgerClient, writer: Ledger
) -> None:
    key = f"http-{uuid.uuid4().hex}"
    version = writer.put(key, message(0)).version
    postgres_pair.stop_standby()
    try:
        for i in range(1, 101):  # `api.http`: no retry of a 503 hides an answer here
            version = writer.put(key, message(i)).version
            for suffix, params in (("/context", {"min_version": version}), ("/messages", {}),
                                   ("", {"min_version": version})):  # fmt: skip
                answer = api.http.get(session_path(key, suffix), params=params)
                assert answer.status_code == 200, answer.text
            assert answer.headers["ETag"] == f'"{version}"'
        assert api.http.get("/readyz").status_code == 200
    finally:
        postgres_pair.start_standby()
    deadline = time.monotonic() + 30
    while api.head(key).version != version:
        assert time.monotonic() < deadline
        time.sleep(0.05)


def test_metrics_show_each_standby_as_the_router_sees_it(
    postgres_pair: PostgresPair, api: LedgerClient
) -> None:
    deadline = time.monotonic() + 30
    while True:  # (until the server's first check of the standby)
        text = api.http.get("/metrics").text
        lines = [line for line in text.splitlines() if line.startswith("session_ledger_replica")]
        serving = [line for line in lines if line.startswith("session_ledger_replica_serving{")]
        if serving and serving[0].endswith(" 1.0"):
            break
        assert time.monotonic() < deadline, lines
        time.sleep(0.1)
    lag = [line for line in lines if line.startswith("session_ledger_replica_lag_seconds{")]
    assert len(lag) == 1 and 'replica="' in lag[0]
    assert 0 <= float(lag[0].rsplit(" ", 1)[1]) < 30
