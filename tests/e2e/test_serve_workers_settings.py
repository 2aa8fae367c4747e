"""`serve` with two workers: its workers serve the store its `--database-url` option
names, not the one `LEDGER_DATABASE_URL` names, though they are processes of their own;
and `serve`, run in a host's process, leaves that process's environment as it was."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings

from .conftest import free_port, run_cli, server_env

# Runs `serve` in its own process's main thread (uvicorn's supervisor takes the signals);
# a thread writes through the workers once they are ready, then stops the server.
DRIVER = """
import json, os, signal, sys, threading, time
import httpx
from session_ledger.api.cli import cli
from session_ledger.api.client import LedgerClient

url, port, admin, sessions = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
base = f"http://127.0.0.1:{port}"
before = dict(os.environ)


def write_then_stop():
    try:
        for _ in range(600):
            try:
                if httpx.get(base + "/readyz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        with LedgerClient(base, admin, timeout=60) as client:
            for i in range(sessions):
                client.put(f"flag/{i}", {"role": "user", "content": "hi"})
    finally:
        os.kill(os.getpid(), signal.SIGINT)


threading.Thread(target=write_then_stop, daemon=True).start()
cli(["serve", "--workers", "2", "--port", port, "--database-url", url], standalone_mode=False)
after = dict(os.environ)
print(json.dumps(sorted(k for k in {**before, **after} if before.get(k) != after.get(k))))
"""
SESSIONS = 8  # several writes on new connections: both workers answer some


@pytest.mark.slow
def test_workers_serve_the_store_the_option_names(tmp_path: Path) -> None:
    admin = "sl_test_" + uuid.uuid4().hex
    flagged, configured = (f"sqlite:///{tmp_path / name / 'ledger.db'}" for name in "ab")
    # Both are stores ready to serve: a worker reading the environment would start fine.
    env = server_env(configured, LEDGER_BOOTSTRAP_KEY=admin)
    assert run_cli(env, "migrate").returncode == 0
    done = subprocess.run(
        [sys.executable, "-c", DRIVER, flagged, str(free_port()), admin, str(SESSIONS)],
        env=env, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-4000:]
    assert json.loads(done.stdout.strip().splitlines()[-1]) == []  # the environment as it was
    for url, held in ((flagged, SESSIONS), (configured, 0)):
        ledger = open_ledger(Settings(database_url=url, tokenizer="whitespace"))
        try:
            stored = [k for k in (f"flag/{i}" for i in range(SESSIONS)) if ledger.get_all(k)]
            assert len(stored) == held, url
        finally:
            ledger.close()
