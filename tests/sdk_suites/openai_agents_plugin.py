"""A pytest plugin that runs openai-agents' own session tests with `LedgerSession` in
place of `SQLiteSession`.

Loaded into a pytest run of the SDK's checkout (`-p openai_agents_plugin`, this folder
on PYTHONPATH: test_openai_agents_suite.py does it, docs/agent-sdks.md says how by hand).
Every test's `SQLiteSession` is `LedgerSession` under that name and with its constructor:
one `db_path` (and table names) is one key prefix in the ledger named by
LEDGER_SDK_URL (a database URL opened in process, or a server's http(s):// URL with
LEDGER_SDK_API_KEY), and `:memory:` a prefix of its own per session made. The tests
that reach into SQLite itself (its connections, locks, tables and rows) are skipped,
each with its reason.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import uuid
from pathlib import Path
from typing import Any

import agents
import agents.memory
import pytest

from session_ledger.api.openai_agents import LedgerSession

_RUN = uuid.uuid4().hex[:8]  # every key of this run starts with it: runs never meet
_memory_stores = itertools.count()

CONNECTIONS = "inspects SQLiteSession's per-thread sqlite3 connections (session._connections)"
CORRUPT_ROWS = (
    "writes a corrupt row into SQLiteSession's table by hand; the ledger refuses what is "
    "not JSON at the write (tests/openai_agents/test_ledger_session.py: bad items)"
)
WRITE_LOCK = (
    "probes the SQLite file's write lock and transactions after a failed write; a failed "
    "ledger write stores nothing (tests/openai_agents/test_ledger_session.py: bad items)"
)
FILE_LOCK = "inspects SQLiteSession's process-wide file lock table (_file_locks)"
COMMIT_HOOK = (
    "pauses a hand-made sqlite3 connection's commit; the same cancellation is tested "
    "on the ledger's write in tests/openai_agents/test_ledger_session.py"
)
SKIPPED = {
    "test_sqlite_session_close_closes_worker_thread_connections": CONNECTIONS,
    "test_sqlite_session_reaps_connections_from_exited_worker_threads": CONNECTIONS,
    "test_sqlite_session_closes_retired_connections_before_the_next_allocation": CONNECTIONS,
    "test_sqlite_session_keeps_connections_of_live_worker_threads": CONNECTIONS,
    "test_sqlite_session_pop_item_skips_corrupt_most_recent": CORRUPT_ROWS,
    "test_sqlite_session_pop_item_returns_none_after_dropping_only_corrupt_rows": CORRUPT_ROWS,
    "test_sqlite_session_get_items_limit_skips_corrupt_newest_rows": CORRUPT_ROWS,
    "test_sqlite_session_get_items_session_settings_limit_skips_corrupt_rows": CORRUPT_ROWS,
    "test_sqlite_session_file_lock_is_shared_across_instances": FILE_LOCK,
    "test_sqlite_session_failed_add_items_releases_write_lock": WRITE_LOCK,
    "test_sqlite_session_failed_clear_session_rolls_back": WRITE_LOCK,
    "test_sqlite_session_failed_pop_item_releases_write_lock": WRITE_LOCK,
    "test_sqlite_session_rollback_failure_evicts_connection": WRITE_LOCK,
    "test_sqlite_session_close_retries_quarantined_connection": WRITE_LOCK,
    "test_sqlite_session_post_commit_cancellation_propagates_after_known_outcome": COMMIT_HOOK,
}


def _target() -> dict[str, Any]:
    url = os.environ.get("LEDGER_SDK_URL")
    if not url:
        raise pytest.UsageError("set LEDGER_SDK_URL: a database URL or a server's http(s) URL")
    api_key = os.environ.get("LEDGER_SDK_API_KEY")
    return {"url": url, "api_key": api_key} if api_key else {"url": url}


class SQLiteSession(LedgerSession):
    """`LedgerSession` with `SQLiteSession`'s name and constructor."""

    def __init__(
        self, session_id: str, db_path: str | Path = ":memory:",
        sessions_table: str = "agent_sessions", messages_table: str = "agent_messages",
        session_settings: Any = None,
    ) -> None:  # fmt: skip
        if str(db_path) == ":memory:":
            store = f"memory-{next(_memory_stores)}"
        else:
            where = f"{Path(db_path).resolve()}|{sessions_table}|{messages_table}"
            store = hashlib.sha256(where.encode()).hexdigest()[:12]
        super().__init__(
            session_id, key=f"sdk/{_RUN}/{store}/{session_id}",
            session_settings=session_settings, **_target(),
        )  # fmt: skip
        self.db_path = db_path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        reason = SKIPPED.get(getattr(item, "originalname", item.name))
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"SQLite internals: {reason}"))


@pytest.fixture(autouse=True)
def ledger_session(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's `SQLiteSession`, wherever it looks the name up, is the ledger's."""
    monkeypatch.setattr(agents, "SQLiteSession", SQLiteSession)
    monkeypatch.setattr(agents.memory, "SQLiteSession", SQLiteSession, raising=False)
    if hasattr(request.module, "SQLiteSession"):
        monkeypatch.setattr(request.module, "SQLiteSession", SQLiteSession)
