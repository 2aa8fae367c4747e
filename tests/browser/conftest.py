"""Browser tests of the audit viewer: a real headless Chromium (Debian's `chromium`,
driven by Playwright) against a real `session-ledger serve` on a free port.

Chromium is the system's (/usr/bin/chromium, or LEDGER_TEST_CHROMIUM): when it or
Playwright is missing the tests skip, saying so, unless LEDGER_REQUIRE_BROWSER=1 (CI sets
it) makes them fail. LEDGER_UPDATE_SCREENSHOTS=1 rewrites the screenshots in docs/.
"""

from __future__ import annotations

import os
import secrets
import shutil
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import sync_playwright

from tests.e2e.conftest import Server, run_cli, server_env

CHROMIUM = os.environ.get("LEDGER_TEST_CHROMIUM", "/usr/bin/chromium")
# No sandbox (CI containers run as root), and nothing the browser would fetch by itself.
CHROMIUM_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
]  # fmt: skip
# The store's real limits: the long session is written in one request.
DEFAULT_LIMITS = {
    "LEDGER_MAX_BODY_BYTES": str(40 * 1024 * 1024),
    "LEDGER_MAX_MESSAGE_BYTES": str(4 * 1024 * 1024),
    "LEDGER_MAX_MESSAGES_PER_WRITE": "10000",
    "LEDGER_MAX_WRITE_BYTES": str(32 * 1024 * 1024),
}
SCREENSHOTS = Path(__file__).resolve().parents[2] / "docs" / "screenshots"


def _missing(reason: str) -> None:
    if os.environ.get("LEDGER_REQUIRE_BROWSER") == "1":
        pytest.fail(f"{reason} (LEDGER_REQUIRE_BROWSER=1)")
    pytest.skip(f"SKIPPING BROWSER TESTS: {reason}; set LEDGER_REQUIRE_BROWSER=1 to fail")


@dataclass
class Viewer:
    """A running server, its keys (tenant A: admin, agent, auditor; tenant B: agent)."""

    server: Server
    keys: dict[str, str]

    @property
    def base_url(self) -> str:
        return self.server.base_url

    def api(self, who: str) -> httpx.Client:
        return httpx.Client(base_url=self.base_url, timeout=120,
                            headers={"Authorization": f"Bearer {self.keys[who]}"})  # fmt: skip


@pytest.fixture(scope="module")
def viewer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Viewer]:
    """A server on a SQLite file of its own, with the store's default limits."""
    url = f"sqlite:///{tmp_path_factory.mktemp('viewer') / 'ledger.db'}"
    admin = "sl_test_" + secrets.token_urlsafe(24)
    server = Server(server_env(url, LEDGER_BOOTSTRAP_KEY=admin, **DEFAULT_LIMITS)).start()
    try:
        keys = {"a_admin": admin}
        with httpx.Client(base_url=server.base_url, timeout=60,
                          headers={"Authorization": f"Bearer {admin}"}) as client:  # fmt: skip
            for role in ("agent", "auditor"):
                created = client.post("/v1/keys", json={"role": role, "name": role})
                keys[f"a_{role}"] = created.raise_for_status().json()["key"]
        done = run_cli(server.env, "keys", "create", "--tenant", "tenant-b", "--role", "agent")
        assert done.returncode == 0, done.stderr
        keys["b_agent"] = next(
            line.split(": ", 1)[1] for line in done.stdout.splitlines() if line.startswith("key: ")
        )
        yield Viewer(server, keys)
    finally:
        server.stop()


@pytest.fixture(scope="module")
def chromium() -> Iterator[Any]:
    """Chromium, launched once per module: Playwright's sync API keeps an event loop
    running in this thread while it is open, where every later `asyncio.run` would fail."""
    if not (os.access(CHROMIUM, os.X_OK) or shutil.which(CHROMIUM)):
        _missing(f"no Chromium at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_FLAGS)
        yield browser
        browser.close()


@pytest.fixture
def page(chromium: Any) -> Iterator[Any]:
    """A fresh browser tab (its own sessionStorage) that records what a page must never do:
    open a dialog, fail a script, break the Content-Security-Policy."""
    context = chromium.new_context(accept_downloads=True, viewport={"width": 1280, "height": 900})
    tab = context.new_page()
    tab.problems = []
    tab.on("dialog", lambda d: (tab.problems.append(f"dialog: {d.message}"), d.dismiss()))
    tab.on("pageerror", lambda e: tab.problems.append(f"script error: {e}"))
    tab.on("console", lambda m: m.type == "error" and "401" not in m.text
           and "404" not in m.text and tab.problems.append(f"console: {m.text}"))  # fmt: skip
    yield tab
    context.close()


@pytest.fixture
def screenshot() -> Any:
    """Saves a screenshot to docs/screenshots when LEDGER_UPDATE_SCREENSHOTS=1."""

    def take(tab: Any, name: str) -> None:
        if os.environ.get("LEDGER_UPDATE_SCREENSHOTS") == "1":
            SCREENSHOTS.mkdir(exist_ok=True)
            tab.screenshot(path=str(SCREENSHOTS / f"{name}.png"), full_page=False)

    return take


def fresh_key(prefix: str) -> str:
    return f"{prefix}/{uuid.uuid4().hex[:8]} chat ✓"
