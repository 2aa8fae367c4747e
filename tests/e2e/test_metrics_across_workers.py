"""`serve` with four workers: `/metrics` sums every worker's counters, whichever worker
answers the scrape; the workers' metric files live in a folder `serve` removes when it
stops; `LEDGER_LOG_FORMAT=json` logs JSON lines that carry the request id."""

from __future__ import annotations

import json
import shutil
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families

from .conftest import Server, server_env

WORKERS = 4
ROUND = 40  # requests sent at once, until at least two workers answered some
POSTS = ("session_ledger_http_requests_total", "POST")


def posts_counted(text: str) -> float:
    """The POST requests a Prometheus text answer counts."""
    return sum(
        s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == POSTS[0] and s.labels.get("method") == POSTS[1]
    )


def posts_by_worker(metrics_dir: Path, scratch: Path) -> list[float]:
    """Each worker's own POST count: its metric file read alone."""
    counts = []
    for i, file in enumerate(sorted(metrics_dir.glob("counter_*.db"))):
        alone = scratch / str(i)
        alone.mkdir(parents=True)
        shutil.copy(file, alone)
        registry = CollectorRegistry()
        MultiProcessCollector(registry, path=str(alone))
        counts.append(sum(
            s.value for metric in registry.collect() for s in metric.samples
            if s.name == POSTS[0] and s.labels.get("method") == POSTS[1]
        ))  # fmt: skip
    return counts


def settled(read: Callable[[], float], expected: float) -> float:
    """`read()` once it equals `expected`, or its last value after a few seconds: a worker
    counts a request after it has sent the answer, so a count read at once may lag by the
    requests still finishing."""
    deadline = time.monotonic() + 10
    while (value := read()) != expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return value


@pytest.mark.slow
def test_metrics_sum_every_workers_counters(tmp_path: Path) -> None:
    # The server's temporary files (its metrics folder among them) go under tmp_path.
    temp = tmp_path / "tmp"
    temp.mkdir()
    admin = "sl_test_" + uuid.uuid4().hex
    env = server_env(
        f"sqlite:///{tmp_path / 'ledger.db'}", LEDGER_WORKERS=str(WORKERS),
        LEDGER_LOG_FORMAT="json", LEDGER_BOOTSTRAP_KEY=admin, TMPDIR=str(temp),
    )  # fmt: skip
    server = Server(env).start()
    try:
        (metrics_dir,) = temp.glob("session-ledger-metrics-*")
        headers = {"Authorization": f"Bearer {admin}"}

        def post(n: int) -> int:
            # A connection per request, so the workers share them out.
            with httpx.Client(base_url=server.base_url, headers=headers, timeout=60) as http:
                answer = http.post(
                    f"/v1/sessions/worker-{n}/messages",
                    json={"messages": [{"role": "user", "content": f"message {n}"}]},
                    headers={"X-Request-ID": f"req-{n}"},
                )
                return answer.status_code

        sent = 0
        with ThreadPoolExecutor(8) as pool:
            for _ in range(10):
                assert set(pool.map(post, range(sent, sent + ROUND))) == {200}
                sent += ROUND
                by_worker = posts_by_worker(metrics_dir, tmp_path / f"scratch-{sent}")
                if sum(1 for c in by_worker if c) >= 2:
                    break
        assert sum(1 for c in by_worker if c) >= 2, f"one worker took every request: {by_worker}"
        scratch = iter(range(1_000_000))
        total = settled(
            lambda: sum(posts_by_worker(metrics_dir, tmp_path / f"settled-{next(scratch)}")), sent
        )
        assert total == sent

        for _ in range(2 * WORKERS):  # scrapes on fresh connections, to several workers
            text = httpx.get(f"{server.base_url}/metrics", timeout=60).text
            assert posts_counted(text) == sent  # every count settled above
            assert (
                f'session_ledger_events_written_total{{type="MessagesAppended"}} {sent}.0' in text
            )
            assert f'session_ledger_events_written_total{{type="SessionStarted"}} {sent}.0' in text
    finally:
        output = server.stop()
    assert not metrics_dir.exists()  # serve removed its folder

    lines = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    access = {line["request_id"]: line for line in lines if line["logger"] == "uvicorn.access"}
    assert {f"req-{n}" for n in range(sent)} <= set(access)
    first = access["req-0"]
    assert (first["method"], first["path"], first["status"]) == (
        "POST", "/v1/sessions/worker-0/messages", 200,
    )  # fmt: skip
    assert {"time", "level", "message"} <= set(first)
