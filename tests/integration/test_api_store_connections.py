"""The SQLite key and limit stores hold a bounded number of file descriptors whatever the
threads that call them: threads that come and go (as a server's worker threads do) and
bursts of many threads at once leave no descriptor behind."""

from __future__ import annotations

import contextlib
import os
import secrets
import sqlite3
import threading
from collections.abc import Callable
from pathlib import Path

from session_ledger.api.bootstrap import open_key_store, open_limit_store
from session_ledger.projections.rate_limit_store import Bucket

POOL_SIZE = 4
# Each connection holds the database and its WAL; the -shm is one per file and process.
MOST_DESCRIPTORS = 2 * POOL_SIZE


def open_descriptors() -> int:
    return len(os.listdir("/proc/self/fd"))


def in_threads(call: Callable[[], object], threads: int) -> None:
    """`call` in `threads` new threads at once, each ended before this returns."""
    start = threading.Barrier(threads)

    def run() -> None:
        start.wait()
        call()

    started = [threading.Thread(target=run) for _ in range(threads)]
    for thread in started:
        thread.start()
    for thread in started:
        thread.join()


def test_threads_that_come_and_go_leave_no_descriptor_open(tmp_path: Path) -> None:
    db = tmp_path / "ledger.db"
    with contextlib.closing(sqlite3.connect(db)) as conn:  # as the ledger leaves its file
        conn.execute("PRAGMA journal_mode=WAL")
    url = f"sqlite:///{db}"
    keys = open_key_store(url, pool_size=POOL_SIZE)
    limits = open_limit_store(url, pool_size=POOL_SIZE)
    keys.migrate()
    limits.migrate()
    _, secret = keys.create("t", "agent")
    holder = open_key_store(url, pool_size=1)  # another connection, in a read: a lock held
    before = open_descriptors()
    try:
        with holder.table.connections.connection() as held:  # type: ignore[attr-defined]
            held.execute("BEGIN")
            held.execute("SELECT * FROM ledger_api_keys").fetchall()

            def requests() -> None:
                assert keys.authenticate(f"sl_{secrets.token_urlsafe(32)}") is None
                assert keys.authenticate(secret) is not None
                limits.take([Bucket(f"requests:key:{secrets.token_hex(4)}", 0.001, 1.0)], 1e6)

            for _ in range(10):
                in_threads(requests, 24)
            held.execute("COMMIT")
        after = open_descriptors()
    finally:
        holder.close()
        keys.close()
        limits.close()
    assert after - before <= 2 * MOST_DESCRIPTORS, f"{before} descriptors before, {after} after"
