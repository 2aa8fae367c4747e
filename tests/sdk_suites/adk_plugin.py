"""A pytest plugin that runs Google ADK's own session-service tests against the ledger.

ADK's `tests/unittests/sessions/test_session_service.py` makes its services with the
module function `get_session_service(service_type, ...)` (older versions call it in
each test, newer ones in a `session_service` fixture; `test_get_user_state.py` with
`_make_service`). This plugin replaces that
function (and the module's name `DatabaseSessionService`, for the tests that make one by
hand) in every collected ADK module: each test then gets a `LedgerSessionService`
over an in-process Ledger on SQLite or PostgreSQL (`LEDGER_ADK_STORE=sqlite|postgres`),
a fresh tenant per service so tests never see each other's sessions.

Tests that only construct ADK's own `DatabaseSessionService` / `SqliteSessionService`
and read their internals (SQL tables, ORM sessions, engine options) are skipped, each
with its reason; so are the second and later runs of a test parametrized over ADK's
backends (they would run the same ledger service again). Run by docs/agent-sdks.md's
command, or by tests/sdk_suites/test_adk_suite.py when `LEDGER_SDK_CHECKOUT` is set.
"""

from __future__ import annotations

import os
import tempfile
import uuid
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.google_adk import LedgerSessionService
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger

STORE = os.environ.get("LEDGER_ADK_STORE", "sqlite")
BACKEND_PARAMS = ("service_type", "session_service")
# The module functions ADK's test files make their session services with
FACTORIES = ("get_session_service", "_make_service")

# ADK tests that exercise ADK's own database services rather than a session service
# through BaseSessionService: what each reads that the ledger does not have.
INTERNALS = "reads DatabaseSessionService internals ({}), which LedgerSessionService has no part of"
SKIPPED: dict[str, str] = {
    "test_database_session_service_enables_pool_pre_ping_by_default": INTERNALS.format(
        "SQLAlchemy engine options"
    ),
    "test_database_session_service_respects_pool_pre_ping_override": INTERNALS.format(
        "SQLAlchemy engine options"
    ),
    "test_database_session_service_creates_read_only_engine_for_spanner": INTERNALS.format(
        "its read-only engine"
    ),
    "test_database_session_service_creates_read_only_engine_for_other_dialects": (
        INTERNALS.format("its read-only engine")
    ),
    "test_database_session_service_get_session_uses_read_only_factory": INTERNALS.format(
        "its ORM session factories"
    ),
    "test_database_session_service_list_sessions_uses_read_only_factory": INTERNALS.format(
        "its ORM session factories"
    ),
    "test_append_event_raises_if_app_state_row_missing": INTERNALS.format(
        "deletes a row of its app_states table"
    ),
    "test_append_event_raises_if_user_state_row_missing": INTERNALS.format(
        "deletes a row of its user_states table"
    ),
    "test_create_session_calls_rollback_on_commit_failure": INTERNALS.format(
        "a spy on its ORM session's rollback"
    ),
    "test_append_event_calls_rollback_on_commit_failure": INTERNALS.format(
        "a spy on its ORM session's rollback"
    ),
    "test_delete_session_calls_rollback_on_commit_failure": INTERNALS.format(
        "a spy on its ORM session's rollback"
    ),
    "test_service_recovers_after_multiple_failures": INTERNALS.format(
        "a spy on its ORM session's rollback"
    ),
    "test_append_event_reads_storage_revision_before_commit": INTERNALS.format(
        "its storage row's revision methods"
    ),
    "test_create_session_reads_storage_revision_before_commit": INTERNALS.format(
        "its storage row's revision methods"
    ),
    "test_concurrent_prepare_tables_no_race_condition": INTERNALS.format("prepare_tables"),
    "test_prepare_tables_serializes_schema_detection_and_creation": INTERNALS.format(
        "prepare_tables"
    ),
    "test_prepare_tables_idempotent_after_creation": INTERNALS.format("prepare_tables"),
    "test_public_prepare_tables_eager_initialization": INTERNALS.format("prepare_tables"),
    "test_get_or_create_state_returns_existing_row": INTERNALS.format("_get_or_create_state"),
    "test_get_or_create_state_creates_new_row": INTERNALS.format("_get_or_create_state"),
    "test_get_or_create_state_handles_race_condition": INTERNALS.format("_get_or_create_state"),
    "test_append_event_locks_only_scopes_with_deltas": INTERNALS.format("its row-lock requests"),
    "test_database_session_service_visible_in_module_namespace": (
        "checks ADK's own module namespace, not a session service"
    ),
    "test_vertex_ai_session_service_raises_not_implemented_for_get_user_state": (
        "tests VertexAiSessionService (google-adk[gcp]), not a service this substitutes"
    ),
    "test_database_session_service_strips_timezone_for_dialect": (
        "tests datetime arithmetic the test writes out for ADK's database dialects"
    ),
    "test_database_session_service_preserves_timezone_for_other_dialects": (
        "tests datetime arithmetic the test writes out for ADK's database dialects"
    ),
    "test_sqlite_session_service_accepts_sqlite_urls": "tests SqliteSessionService's URLs",
    "test_sqlite_session_service_preserves_uri_query_parameters": (
        "tests SqliteSessionService's URLs"
    ),
    "test_sqlite_session_service_accepts_absolute_sqlite_urls": (
        "tests SqliteSessionService's URLs"
    ),
    "test_append_event_when_session_is_same_ref_as_storage_session": (
        "reads InMemorySessionService's storage dict"
    ),
}

# Files of ADK's sessions tests that hold no test of a session service through its
# interface: each tests one of ADK's other backends or a storage detail of its own.
NOT_RUN: dict[str, str] = {
    "test_vertex_ai_session_service.py": "tests the Vertex AI Agent Engine client's requests",
    "test_firestore_session_service.py": "tests the Firestore client's calls",
    "test_dynamic_pickle_type.py": "tests a column type of ADK's database schema (gone in 2.x)",
    "test_v0_storage_event.py": "tests a row type of ADK's database schema",
    "test_storage_event_serialization.py": "tests a row type of ADK's database schema",
    "test_safe_unpickle.py": "tests the unpickling of ADK's old database rows",
    "migration": "tests migrations of ADK's database schema",
    "test_langchain_vector_store_memory_service.py": "tests a memory service, not sessions",
    "test_precise_timestamp.py": "tests a column type of ADK's database schema",
    "test_large_context_state.py": "tests a context reference store, not a session service",
}
_not_run: dict[str, str] = {}
_opened: ExitStack = ExitStack()
_ledger: Ledger | None = None


def _store_url() -> str:
    if STORE == "sqlite":
        folder = _opened.enter_context(tempfile.TemporaryDirectory(prefix="adk-suite-"))
        return f"sqlite:///{Path(folder) / 'ledger.db'}"
    if STORE == "postgres":
        from tests.conftest import fresh_postgres_database

        return _opened.enter_context(fresh_postgres_database("adk_suite"))
    raise pytest.UsageError(f"LEDGER_ADK_STORE must be sqlite or postgres; got {STORE!r}")


def ledger_service(*args: Any, **kwargs: Any) -> LedgerSessionService:
    """What ADK's `get_session_service` returns under this plugin, whatever it was asked."""
    global _ledger
    if _ledger is None:
        settings = Settings(database_url=_store_url(), tokenizer="whitespace")
        migrate(settings)
        _ledger = open_ledger(settings)
    return LedgerSessionService(ledger=_ledger, tenant=f"adk-{uuid.uuid4().hex[:12]}")


class LedgerInPlaceOfDatabase(LedgerSessionService):
    """What ADK's test modules get under the name `DatabaseSessionService`: the tests that
    make one by hand (with a URL) and use it through its interface run on the ledger."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        substitute = ledger_service()
        super().__init__(store=substitute.store)


def pytest_report_header(config: pytest.Config) -> str:
    return f"ADK session tests with LedgerSessionService on {STORE}"


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    reason = NOT_RUN.get(collection_path.name)
    if reason is None:
        return None
    _not_run[collection_path.name] = reason
    return True


def pytest_terminal_summary(terminalreporter: Any) -> None:
    for name, reason in sorted(_not_run.items()):
        terminalreporter.write_line(f"NOT RUN {name}: {reason}")


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    first_run: dict[tuple[str, str], str] = {}
    for item in items:
        module = getattr(item, "module", None)
        factories = [f for f in FACTORIES if module is not None and hasattr(module, f)]
        for factory in factories:
            setattr(module, factory, ledger_service)
        if factories and hasattr(module, "DatabaseSessionService"):
            module.DatabaseSessionService = LedgerInPlaceOfDatabase
        name = getattr(item, "originalname", item.name)
        if name in SKIPPED:
            item.add_marker(pytest.mark.skip(reason=SKIPPED[name]))
            continue
        callspec = getattr(item, "callspec", None)
        backend = next((p for p in BACKEND_PARAMS if callspec and p in callspec.params), None)
        if backend is None:
            continue
        # The test's other parameters, without the backend: one run per combination.
        others = "-".join(
            f"{k}={v}" for k, v in sorted(callspec.params.items()) if k != backend
        )  # fmt: skip
        seen = first_run.setdefault((item.nodeid.split("[")[0], others), item.name)
        if seen != item.name:
            item.add_marker(pytest.mark.skip(
                reason=f"ADK backend parameter: the same LedgerSessionService as {seen}"
            ))  # fmt: skip


def pytest_unconfigure(config: pytest.Config) -> None:
    global _ledger
    if _ledger is not None:
        _ledger.close()
        _ledger = None
    _opened.close()
