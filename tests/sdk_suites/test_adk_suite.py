"""Google ADK's own session-service tests, run with LedgerSessionService substituted
(tests/sdk_suites/adk_plugin.py), on SQLite and on PostgreSQL.

Needs a checkout of ADK's repository (its tests are not in the package):
`LEDGER_ADK_CHECKOUT=/path/to/adk-python` (or `LEDGER_SDK_CHECKOUT`, when it holds
ADK's `tests/unittests/sessions`). Without one this test skips, saying so; the
behaviours it checks are also covered by tests/google_adk/, which always run.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SESSIONS = Path("tests/unittests/sessions")


def adk_checkout() -> Path | None:
    for variable in ("LEDGER_ADK_CHECKOUT", "LEDGER_SDK_CHECKOUT"):
        value = os.environ.get(variable)
        if value and (Path(value) / SESSIONS).is_dir():
            return Path(value)
    return None


def run_suite(checkout: Path, store: str) -> subprocess.CompletedProcess[str]:
    """ADK's sessions tests with the plugin, from this repository (whose `tests`
    package the plugin is in; ADK's test files are imported by path)."""
    command = [
        sys.executable, "-m", "pytest", "-c", str(checkout / "pyproject.toml"),
        "--rootdir", str(checkout), "-p", "tests.sdk_suites.adk_plugin",
        "--import-mode=importlib", "-p", "no:cacheprovider", "-q", "-rs",
        str(checkout / SESSIONS),
    ]  # fmt: skip
    env = {**os.environ, "LEDGER_ADK_STORE": store}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False
    )


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_adk_session_tests_pass_with_the_ledger(store: str) -> None:
    checkout = adk_checkout()
    if checkout is None:
        pytest.skip(
            "no checkout of google/adk-python: set LEDGER_ADK_CHECKOUT to one to run ADK's "
            "own session tests against LedgerSessionService (docs/agent-sdks.md)"
        )
    if store == "postgres":
        from tests.conftest import postgres_server_url

        postgres_server_url()  # (skips, saying why, when the server is away)
    done = run_suite(checkout, store)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else done.stderr
    assert done.returncode == 0, done.stdout[-5000:] + done.stderr[-2000:]
    assert re.search(r"\d+ passed", summary), summary
    assert "failed" not in summary and "error" not in summary, summary
