"""A read's memory does not grow with the session: a server reading a 100 MB session over
HTTP, every page of its history and the largest context window it answers, grows its
resident memory by under 50 MB (it held each answer four times over: 63 MiB took 293 MiB).

The session is written by this process into the server's SQLite file before the server
starts, so the server's memory is its reads' alone. The peak is the kernel's (VmHWM,
reset once the server is warm), so an answer held for an instant counts. A size test,
not a time test."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from session_ledger.api.client import LedgerClient
from session_ledger.api.settings import Settings
from tests.conftest import make_ledger
from tests.e2e.conftest import LIMITS, Server, server_env

MB = 1024 * 1024
MESSAGES = 100  # of 1 MiB each, in 4 writes of 25
GROWTH = 50 * MB
TEXT = "word " * (MB // 5)  # 1 MiB of 209,715 tokens


def status_kib(pid: int, field: str) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    raise LookupError(field)


@pytest.fixture(scope="module")
def large_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Server, str]]:
    """A server on a SQLite file holding one session of MESSAGES x 1 MiB, and its key."""
    url = f"sqlite:///{tmp_path_factory.mktemp('large') / 'ledger.db'}"
    ledger = make_ledger(Settings(database_url=url, tokenizer="whitespace"))
    try:
        for write in range(4):
            ledger.put_messages("large", [
                {"role": ("user", "assistant")[i % 2], "content": f"{write}.{i} " + TEXT}
                for i in range(MESSAGES // 4)
            ])  # fmt: skip
    finally:
        ledger.close()
    key = "sl_test_" + secrets.token_urlsafe(24)
    env = {k: v for k, v in server_env(url, LEDGER_BOOTSTRAP_KEY=key).items() if k not in LIMITS}
    server = Server({**env, "LEDGER_TOKENIZER": "whitespace"}).start()
    try:
        yield server, key
    finally:
        server.stop()


@pytest.mark.slow
def test_reading_a_100_mb_session_grows_the_server_by_under_50_mb(
    large_session: tuple[Server, str],
) -> None:
    server, key = large_session
    assert server.process is not None
    pid = server.process.pid
    with LedgerClient(server.base_url, key, timeout=120) as client:
        assert len(client.get_all("large", limit=2)) == 2  # warm: every path loaded once
        assert len(client.get("large", token_limit=300_000)) == 1
        head = client.head("large")
        before = status_kib(pid, "VmRSS") * 1024
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM from here on

        history = client.get_all("large")
        assert len(history) == MESSAGES == head.message_count
        assert sum(len(m.content or "") for m in history) > 100 * MB
        del history
        # The largest window a server of the default LEDGER_MAX_ANSWER_BYTES (16 MiB) answers
        # (its bodies are about 15 MiB), and one over it, refused before its bodies are read.
        per_message = head.token_total // MESSAGES
        assert len(client.get("large", token_limit=15 * per_message)) == 15
        with httpx.Client(base_url=server.base_url, timeout=120) as http:
            too_large = http.get("/v1/sessions/large/context", params={"token_limit": 10**9},
                                 headers={"Authorization": f"Bearer {key}"})  # fmt: skip
        assert too_large.status_code == 413, too_large.text
        peak = status_kib(pid, "VmHWM") * 1024
    print(f"server peak {(peak - before) / MB:.1f} MiB over {before / MB:.1f} MiB")
    assert peak - before < GROWTH, f"{(peak - before) / MB:.0f} MiB over {before / MB:.0f} MiB"
