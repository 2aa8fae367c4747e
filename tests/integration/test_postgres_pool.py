"""`LEDGER_POOL_SIZE` is the most PostgreSQL connections a process's pool opens, and an
idle ledger keeps fewer (one, and those it needed at once, until they idle 10 minutes):
many processes share one server's `max_connections`. (The library's pool kept POOL_SIZE
connections open and opened 10 more under load.)"""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import psycopg
import pytest

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from tests.conftest import postgres_server_url

pytestmark = pytest.mark.postgres

POOL = 4


def backends(database: str) -> int:
    """Connections to `database` now (counted from the server's own database)."""
    with psycopg.connect(postgres_server_url(), autocommit=True) as conn:
        row = conn.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = %s", (database,)
        ).fetchone()
    assert row is not None
    return int(row[0])


def test_an_idle_ledger_keeps_fewer_than_the_pool_and_a_busy_one_at_most_the_pool(
    fresh_postgres_url: str,
) -> None:
    database = fresh_postgres_url.rsplit("/", 1)[1]
    settings = Settings(database_url=fresh_postgres_url, tokenizer="whitespace",
                        pool_size=POOL)  # fmt: skip
    migrate(settings)
    ledger = open_ledger(settings)
    try:
        ledger.put("s", {"role": "user", "content": "hello"})
        assert len(ledger.get_all("s")) == 1
        assert 1 <= backends(database) < POOL

        peak, stop = [0], threading.Event()

        def watch() -> None:
            while not stop.is_set():
                peak[0] = max(peak[0], backends(database))

        def work(i: int) -> None:
            for j in range(15):
                ledger.put(f"s{i % 4}", {"role": "user", "content": f"{i}.{j}"})
                ledger.get(f"s{i % 4}", token_limit=50)

        watcher = threading.Thread(target=watch)
        watcher.start()
        try:
            with ThreadPoolExecutor(12) as pool:
                list(pool.map(work, range(12)))
        finally:
            stop.set()
            watcher.join()
        assert sum(ledger.head(f"s{i}").message_count for i in range(4)) == 12 * 15
        assert 1 <= peak[0] <= POOL
    finally:
        ledger.close()
