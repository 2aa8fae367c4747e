"""`/readyz` answers without an API key, so it says only that the store is not ready: the
store's own error (a file's path, a host and port) goes to the server's log."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import open_key_store, open_ledger
from session_ledger.api.settings import Settings


def test_readyz_keeps_the_store_error_for_the_log(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    missing = tmp_path / "no-such-folder" / "keys.db"  # the key store cannot be opened
    settings = Settings(database_url="memory://")
    ledger = open_ledger(settings)
    store = open_key_store(f"sqlite:///{missing}")
    try:
        app = create_app(settings, ledger=ledger, key_store=store)
        with caplog.at_level(logging.WARNING, "session_ledger.api"), TestClient(app) as http:
            answer = http.get("/readyz")
    finally:
        store.close()
        ledger.close()
    assert answer.status_code == 503
    assert answer.json()["error"]["code"] == "store_not_ready"
    assert str(tmp_path) not in answer.text and "no-such-folder" not in answer.text
    assert str(missing) in caplog.text
