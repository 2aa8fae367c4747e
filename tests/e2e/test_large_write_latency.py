"""One agent's large write does not hold the server: while a 4 MiB message of spaces (or
several of one letter) is written, `/healthz` and another tenant's small write answer
within 100 ms at p99, against a real server on SQLite and on PostgreSQL.

The issue's acceptance asks for this bound against a live server, so the test times
requests: on the code before, /healthz waited 5-10 s behind the write (it ran on the
event loop, and tiktoken took seconds on one long pre-token). 100 ms is about twenty
times the p99 of either request with the server idle, and the samplers start once the
write is sent, so that it arrives alone (the case that ran on the loop).
"""

from __future__ import annotations

import contextlib
import json
import secrets
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest

from session_ledger.api.client import LedgerClient
from tests.conftest import fresh_postgres_database
from tests.e2e.conftest import LIMITS, Server, run_cli, server_env

pytestmark = pytest.mark.slow

MESSAGE_CHARS = 4 * 1024 * 1024 - 128  # the largest content within the default 4 MiB message
P99_SECONDS = 0.100
WRITE_TIMEOUT = 120
LEAST_SAMPLES = 20
WRITES = 3  # more samples of the run: its p99 is not its one worst request
SQLITE_COMMIT_SECONDS = 0.150
# No request waits this long: a p99 over hundreds of samples would not see one frozen
# request (the code before held one write on the loop for seconds, and sent the next,
# which found others in flight, to a thread).
MOST_SECONDS = 1.0
OTHER_WRITE = "other tenant's write"


@dataclass
class Live:
    server: Server
    store: str
    agent: str  # tenant A's agent key
    other: str  # tenant B's agent key


@pytest.fixture(
    scope="module", params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)]
)
def live(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Live]:
    """A server with the default limits and tokenizer (cl100k_base)."""
    with contextlib.ExitStack() as stack:
        if request.param == "sqlite":
            url = f"sqlite:///{tmp_path_factory.mktemp('large') / 'ledger.db'}"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_large"))
        admin = "sl_test_" + secrets.token_urlsafe(24)
        env = {k: v for k, v in server_env(url, LEDGER_BOOTSTRAP_KEY=admin).items()
               if k not in LIMITS}  # fmt: skip
        server = Server(env).start()
        stack.callback(server.stop)
        with LedgerClient(server.base_url, admin) as client:
            agent = client.create_key("agent", name="large writer").key
        done = run_cli(env, "keys", "create", "--tenant", "other", "--role", "agent")
        assert done.returncode == 0, done.stderr
        other = next(line.split(": ", 1)[1] for line in done.stdout.splitlines()
                     if line.startswith("key: "))  # fmt: skip
        yield Live(server, request.param, agent, other)


def p99(samples: list[float]) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))]


def sample(client: httpx.Client, send: str, path: str, until: threading.Event) -> list[float]:
    """Latencies of one request after another (5 ms apart) until `until` is set, and at
    least `LEAST_SAMPLES`."""
    times, body = [], {"messages": [{"role": "user", "content": "a small write"}]}
    while not until.is_set() or len(times) < LEAST_SAMPLES:
        started = time.perf_counter()
        answer = client.post(path, json=body) if send == "POST" else client.get(path)
        times.append(time.perf_counter() - started)
        assert answer.status_code == 200, answer.text
        time.sleep(0.005)
    return times


def sampled(live: Live, until: threading.Event) -> dict[str, list[float]]:
    """/healthz and tenant B's small writes, sampled until `until` is set."""
    results: dict[str, list[float]] = {}

    def run(name: str, send: str, path: str, key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        base = live.server.base_url
        with httpx.Client(base_url=base, headers=headers, timeout=WRITE_TIMEOUT) as client:
            results[name] = sample(client, send, path, until)

    samplers = [
        threading.Thread(target=run, args=("healthz", "GET", "/healthz", None)),
        threading.Thread(target=run, args=(OTHER_WRITE, "POST",
                                           "/v1/sessions/small/messages", live.other)),
    ]  # fmt: skip
    for thread in samplers:
        thread.start()
    for thread in samplers:
        thread.join(WRITE_TIMEOUT + 10)
    return results


def latencies_during(live: Live, content: str, messages: int) -> dict[str, list[float]]:
    """Tenant A's write of `messages` x `content`, `WRITES` times one after another (each
    to a session of its own), sampled from 0.2 s after the first was sent until the last
    returns."""
    body = json.dumps({"messages": [{"role": "user", "content": content}] * messages})
    written = threading.Event()
    answers: list[httpx.Response] = []

    def write() -> None:
        headers = {"Authorization": f"Bearer {live.agent}", "Content-Type": "application/json"}
        with httpx.Client(base_url=live.server.base_url, timeout=WRITE_TIMEOUT) as client:
            try:
                for _ in range(WRITES):
                    path = f"/v1/sessions/large-{secrets.token_hex(4)}/messages"
                    answers.append(client.post(path, headers=headers, content=body))
            finally:
                written.set()

    writer = threading.Thread(target=write)
    writer.start()
    time.sleep(0.2)  # the write arrives alone, as in the issue
    results = sampled(live, written)
    writer.join(WRITE_TIMEOUT + 10)
    assert [answer.status_code for answer in answers] == [200] * WRITES, answers[-1].text
    return results


@pytest.mark.parametrize(
    ("content", "messages"),
    [pytest.param(" " * MESSAGE_CHARS, 1, id="4MiB-spaces"),
     pytest.param("x" * MESSAGE_CHARS, 2, id="2x4MiB-x")],
)  # fmt: skip
def test_a_large_write_holds_no_other_request(live: Live, content: str, messages: int) -> None:
    """p99 within 100 ms, plus the p99 of the same requests with the server idle: on an
    idle machine that is a few ms; on one loaded by other processes, the scheduler's
    share is not the write's. On SQLite, another write also waits for the large write's
    transaction (one writer per file: it stores the messages twice, events and rows, and
    syncs them), 50-150 ms for 8 MiB here: allowed once more."""
    idle = threading.Event()
    threading.Timer(1.0, idle.set).start()
    baseline = sampled(live, idle)
    during = latencies_during(live, content, messages)
    for name, times in during.items():
        bound = P99_SECONDS + p99(baseline[name])
        if name == OTHER_WRITE and live.store == "sqlite":
            bound += SQLITE_COMMIT_SECONDS
        print(f"{name}: {len(times)} requests, p99 {p99(times) * 1000:.1f} ms "
              f"(idle: {p99(baseline[name]) * 1000:.1f} ms)")  # fmt: skip
        assert p99(times) < bound, (name, len(times), f"p99 {p99(times) * 1000:.0f} ms")
        assert max(times) < MOST_SECONDS, (name, f"{max(times):.1f} s")
