"""A SQLite ledger's writes take their turn on the lock file beside the database
(projections/write_turns.py): a write waits while another process holds it and commits
once it is let go; one that gets no turn within the lock timeout fails with the store's
error (503 over HTTP) and stores nothing."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest
from eventsourcing.persistence import OperationalError
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.conftest import make_settings, turn_held

USER = {"role": "user", "content": "hello"}


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    settings = make_settings("sqlite", tmp_path, lock_timeout_seconds=1)
    migrate(settings)
    return settings


@pytest.fixture
def ledger(settings: Settings) -> Iterator[Ledger]:
    ledger = open_ledger(settings)
    yield ledger
    ledger.close()


def test_a_write_waits_for_its_turn_then_commits(tmp_path: Path, settings: Settings) -> None:
    settings.lock_timeout_seconds = 30
    ledger = open_ledger(settings)
    before = ledger.put("s", USER).version
    written = threading.Event()

    def write() -> None:
        ledger.put("s", {"role": "assistant", "content": "after the turn"})
        written.set()

    with turn_held(tmp_path / "ledger.db") as let_go:
        writer = threading.Thread(target=write)
        writer.start()
        assert not written.wait(0.2)
        assert [m.content for m in ledger.get_all("s")] == ["hello"]  # reads do not wait
        let_go.set()
    writer.join(10)
    assert written.is_set()
    assert ledger.head("s").version == before + 1
    ledger.close()


def test_a_write_with_no_turn_in_time_fails_and_stores_nothing(
    tmp_path: Path, ledger: Ledger
) -> None:
    before = ledger.put("s", USER).version
    with turn_held(tmp_path / "ledger.db"):
        with pytest.raises(OperationalError, match="database is locked: no turn to write in 1 s"):
            ledger.put("s", {"role": "assistant", "content": "never stored"})
        assert ledger.head("s").version == before
    assert ledger.put("s", {"role": "assistant", "content": "stored"}).version == before + 1
    assert [m.content for m in ledger.get_all("s")] == ["hello", "stored"]


def test_over_http_a_write_with_no_turn_is_a_503(tmp_path: Path, settings: Settings) -> None:
    keys = MemoryKeyStore()
    _, secret = keys.create(settings.default_tenant, "agent")
    app = create_app(settings, key_store=keys)
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
        with turn_held(tmp_path / "ledger.db"):
            response = client.post("/v1/sessions/s/messages", json={"messages": [USER]})
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "store_unavailable"
        response = client.post("/v1/sessions/s/messages", json={"messages": [USER]})
        assert response.status_code == 200, response.text
        stored = client.get("/v1/sessions/s/messages").json()["messages"]
        assert [m["blocks"][0]["text"] for m in stored] == ["hello"]  # the first, not stored
