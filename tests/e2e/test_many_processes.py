"""Scale-out: two server processes on one PostgreSQL, eight clients appending to the same
session through both. Every acknowledged message is stored exactly once, in an order
consistent with each client's own order."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from session_ledger.api.client import LedgerClient
from tests.conftest import fresh_postgres_database

from .conftest import Server, run_cli, server_env

CLIENTS = 8
MESSAGES_PER_CLIENT = 25
SESSION = "shared/agent team"


@pytest.mark.postgres
@pytest.mark.slow
def test_two_processes_eight_clients_every_acknowledged_message_once() -> None:
    with fresh_postgres_database("ledger_scale") as url:
        first = Server(server_env(url)).start()
        second = Server(server_env(url)).start()  # same store, its own process and port
        try:
            created = run_cli(first.env, "keys", "create", "--role", "agent")
            key = created.stdout.split("key: ")[1].strip()

            def append(client: int) -> list[str]:
                acknowledged = []
                servers = (first, second)
                for n in range(MESSAGES_PER_CLIENT):
                    server = servers[(client + n) % 2]
                    with LedgerClient(server.base_url, key, timeout=120) as api:
                        text = f"client {client} message {n}"
                        api.put(SESSION, {"role": "user", "content": text})
                        acknowledged.append(text)
                return acknowledged

            with ThreadPoolExecutor(CLIENTS) as pool:
                acknowledged = list(pool.map(append, range(CLIENTS)))

            with LedgerClient(second.base_url, key) as api:
                stored = [m.blocks[0]["text"] for m in api.get_all(SESSION)]
                head = api.head(SESSION)
        except Exception as exc:
            logs = first.stop() + second.stop()
            raise AssertionError(f"{exc}\nserver output:\n{logs[-20_000:]}") from exc
        finally:
            first.stop()
            second.stop()
    assert sorted(stored) == sorted(text for texts in acknowledged for text in texts)
    assert len(set(stored)) == len(stored) == head.message_count == CLIENTS * MESSAGES_PER_CLIENT
    for texts in acknowledged:  # each client's writes land in the order it made them
        assert [t for t in stored if t in set(texts)] == texts
