"""Requests with unknown API keys against a real `session-ledger serve` on SQLite: they
hold no file descriptor once answered, and one client address that keeps failing is
answered 429 with Retry-After.

The descriptor test sends its requests in rounds with a pause longer than AnyIO's idle
time for worker threads (10 s) between them, so the server's worker threads are retired
and new ones made: a connection tied to a thread that is gone would stay open. Its size
is LEDGER_TEST_UNKNOWN_KEYS (2,000 by default; the issue's acceptance is 10,000)."""

from __future__ import annotations

import asyncio
import os
import secrets
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from .conftest import Server, server_env

REQUESTS = int(os.environ.get("LEDGER_TEST_UNKNOWN_KEYS", "2000"))
ROUNDS = 2 if REQUESTS <= 2000 else 5
CONCURRENCY = 48
THREAD_IDLE_SECONDS = 10  # anyio's WorkerThread.MAX_IDLE_TIME
POOL_SIZE = 2
# The key store's pool may not be full when the count starts: each of its connections
# opened later holds the file and its WAL (the -shm is one per file and process). A leak
# grows by a connection every few requests: hundreds.
TOLERANCE = POOL_SIZE * 2
FAILURE_BURST = 5


def open_descriptors(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


def settled_descriptors(pid: int) -> int:
    """The count once the sockets of a finished burst are closed: the lowest of a few
    looks over two seconds."""
    looks = []
    for _ in range(10):
        time.sleep(0.2)
        looks.append(open_descriptors(pid))
    return min(looks)


def burst(base_url: str, count: int) -> list[int]:
    """`count` reads with fresh unknown keys, `CONCURRENCY` at a time."""

    async def run() -> list[int]:
        limits = httpx.Limits(max_connections=CONCURRENCY, max_keepalive_connections=0)
        async with httpx.AsyncClient(base_url=base_url, limits=limits, timeout=60) as http:
            gate = asyncio.Semaphore(CONCURRENCY)

            async def one() -> int:
                async with gate:
                    headers = {"Authorization": f"Bearer sl_{secrets.token_urlsafe(32)}"}
                    return (await http.get("/v1/sessions", headers=headers)).status_code

            return await asyncio.gather(*(one() for _ in range(count)))

    return asyncio.run(run())


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """A server whose failed authentications are not limited (every request looks its
    key up in the store)."""
    url = f"sqlite:///{tmp_path_factory.mktemp('unknown') / 'ledger.db'}"
    env = server_env(url, LEDGER_AUTH_FAILURES_PER_SECOND="0", LEDGER_POOL_SIZE=str(POOL_SIZE))
    started = Server(env).start()
    yield started
    started.stop()


def test_unknown_keys_leave_no_descriptor_open(server: Server) -> None:
    assert server.process is not None
    pid = server.process.pid
    assert set(burst(server.base_url, 4 * CONCURRENCY)) == {401}  # threads and pools warm
    start = settled_descriptors(pid)
    answers: list[int] = []
    for n in range(ROUNDS):
        if n:
            time.sleep(THREAD_IDLE_SECONDS + 1)
        answers += burst(server.base_url, REQUESTS // ROUNDS)
    after = settled_descriptors(pid)
    assert set(answers) == {401}
    assert after <= start + TOLERANCE, f"{start} descriptors before, {after} after"


def test_failed_authentication_is_limited_per_client_address(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    admin = "sl_test_" + secrets.token_urlsafe(24)
    env = server_env(
        url, LEDGER_BOOTSTRAP_KEY=admin, LEDGER_AUTH_FAILURES_PER_SECOND="0.0001",
        LEDGER_AUTH_FAILURES_BURST=str(FAILURE_BURST),
    )  # fmt: skip
    limited = Server(env).start()
    try:
        with httpx.Client(base_url=limited.base_url, timeout=60) as http:
            assert http.get("/v1/sessions", headers={"Authorization": f"Bearer {admin}"}).is_success

            def unknown() -> httpx.Response:
                headers = {"Authorization": f"Bearer sl_{secrets.token_urlsafe(32)}"}
                return http.get("/v1/sessions", headers=headers)

            answers = [unknown() for _ in range(FAILURE_BURST + 3)]
            assert [a.status_code for a in answers] == [401] * FAILURE_BURST + [429] * 3
            refused = answers[-1]
            assert int(refused.headers["Retry-After"]) > 3600  # one failure per 10,000 s
            error = refused.json()["error"]
            assert (error["code"], error["details"]["limit"]) == (
                "rate_limited",
                "auth_failures:address",
            )
            # A key the server holds still answers from that address; health is never limited.
            assert http.get("/v1/sessions", headers={"Authorization": f"Bearer {admin}"}).is_success
            assert http.get("/healthz").status_code == 200
    finally:
        limited.stop()
