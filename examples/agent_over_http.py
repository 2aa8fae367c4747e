"""The agent of `agent_in_process.py`, its memory on a session-ledger server over HTTP.

    .venv/bin/python examples/agent_over_http.py [DATABASE_URL]

Starts `session-ledger serve` on a free local port (its store: DATABASE_URL, default a
new SQLite file in a temporary folder), makes an `agent` API key with the admin key it
started with, runs the same three turns with `LedgerMemory.from_defaults(url=...)`,
reads the transcript and the audit trail back with `LedgerClient`, and stops the server.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from agent_in_process import SESSION, converse, print_audit, print_transcript

from session_ledger.api.client import LedgerClient
from session_ledger.api.llamaindex import LedgerMemory

START_SECONDS = 60  # a cold start imports the whole stack on a busy machine


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def server(database_url: str, admin_key: str) -> Iterator[str]:
    """`session-ledger serve` in a child process until the block ends: its base URL."""
    port = free_port()
    env = {**os.environ, "LEDGER_DATABASE_URL": database_url, "LEDGER_PORT": str(port),
           "LEDGER_BOOTSTRAP_KEY": admin_key, "LEDGER_ACCESS_LOG": "false"}  # fmt: skip
    command = Path(sys.executable).with_name("session-ledger")
    with tempfile.TemporaryFile() as log:
        process = subprocess.Popen([command, "serve"], env=env, stdout=log, stderr=log)
        base_url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + START_SECONDS
            while not ready(base_url):
                if process.poll() is not None or time.monotonic() > deadline:
                    log.seek(0)
                    raise RuntimeError(f"the server did not start:\n{log.read().decode()}")
                time.sleep(0.2)
            yield base_url
        finally:
            process.terminate()
            process.wait(timeout=30)


def ready(base_url: str) -> bool:
    try:
        return httpx.get(f"{base_url}/readyz", timeout=1).status_code == 200
    except httpx.TransportError:
        return False


def main(database_url: str) -> None:
    admin_key = secrets.token_urlsafe(32)
    with server(database_url, admin_key) as base_url:
        with LedgerClient(base_url, admin_key) as admin:
            agent_key = admin.create_key("agent", name="example agent").key
        # The API key names the tenant and is the actor of every write.
        memory = LedgerMemory.from_defaults(chat_store_key=SESSION, url=base_url, api_key=agent_key)
        asyncio.run(converse(memory))
        with LedgerClient(base_url, agent_key) as api:
            print_transcript(memory.get_all())
            history = api.get_all(SESSION)  # the same ChatMessage values as Ledger.get_all
            print(f"\nLedgerClient reads {len(history)} messages; the last: {history[-1].content}")
            print_audit(api.events(SESSION).events)


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as folder:
        main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{Path(folder) / 'ledger.db'}")
