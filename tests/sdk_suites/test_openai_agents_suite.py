"""openai-agents' own SQLiteSession tests, run with `LedgerSession` substituted, in
process on SQLite and PostgreSQL and over HTTP on each.

Needs a checkout of the SDK's source at the installed version (LEDGER_SDK_CHECKOUT: its
git repository, or its sdist unpacked: docs/agent-sdks.md); skipped without one. The
suite runs in a child pytest of the checkout with openai_agents_plugin.py loaded; every
test passes but those the plugin skips, each for reaching into SQLite itself.
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import migrate
from session_ledger.api.settings import Settings
from tests.conftest import fresh_postgres_database
from tests.e2e import conftest as e2e
from tests.e2e.conftest import Deployment
from tests.sdk_suites.openai_agents_plugin import SKIPPED

deployment = e2e.deployment
CHECKOUT_ENV = "LEDGER_SDK_CHECKOUT"
SUITE = ("tests/memory/test_session.py", "tests/memory/test_session_limit.py")
PLUGINS = Path(__file__).resolve().parent


@pytest.fixture(scope="session")
def checkout() -> Path:
    """The checkout (session-scoped: asked before the servers, which a skip spares)."""
    path = os.environ.get(CHECKOUT_ENV)
    if not path:
        pytest.skip(
            f"{CHECKOUT_ENV} is not set: the SDK's own session tests need a checkout of "
            "openai-agents 0.24 (docs/agent-sdks.md)"
        )
    root = Path(path)
    missing = [name for name in SUITE if not (root / name).is_file()]
    if missing:
        pytest.fail(f"{CHECKOUT_ENV}={root} has no {', '.join(missing)}")
    return root


def run_suite(root: Path, tmp_path: Path, url: str, api_key: str | None = None) -> None:
    """Run the SDK's suite against the ledger at `url`; fail on any failure, error, or a
    skip the plugin did not name."""
    report = tmp_path / "suite.xml"
    env = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    env.update(PYTHONPATH=str(PLUGINS), LEDGER_SDK_URL=url)
    if api_key:
        env["LEDGER_SDK_API_KEY"] = api_key
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p",
         "openai_agents_plugin", f"--junitxml={report}", *SUITE],
        cwd=root, env=env, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    assert report.exists(), done.stdout + done.stderr
    cases = ET.parse(report).getroot().iter("testcase")
    failed, skipped, passed = [], {}, 0
    for case in cases:
        name = case.get("name", "").split("[")[0]
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(case.get("name"))
        elif (skip := case.find("skipped")) is not None:
            skipped[name] = skip.get("message", "")
        else:
            passed += 1
    assert not failed, f"{failed}\n{done.stdout[-4000:]}"
    assert set(skipped) <= set(SKIPPED), skipped  # (an older checkout has fewer of them)
    assert all("SQLite internals" in reason for reason in skipped.values())
    assert passed >= 50, done.stdout[-2000:]  # the suite ran, not merely collected
    print(f"{url}: {passed} passed, {len(skipped)} tests skipped ({done.stdout.splitlines()[-1]})")


def test_in_process_sqlite(checkout: Path, tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    migrate(Settings(database_url=url))
    run_suite(checkout, tmp_path, url)


@pytest.mark.postgres
def test_in_process_postgres(checkout: Path, tmp_path: Path) -> None:
    with fresh_postgres_database("ledger_sdk") as url:
        migrate(Settings(database_url=url))
        run_suite(checkout, tmp_path, url)


def test_over_http(checkout: Path, tmp_path: Path, deployment: Deployment) -> None:
    run_suite(checkout, tmp_path, deployment.base_url, deployment.keys["a_agent"])
