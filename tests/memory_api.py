"""The HTTP API in this process on a memory store: what a test of the request path needs
(the app, its ledger and key store, a client holding one key), and nothing on disk."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, NamedTuple

from fastapi import FastAPI
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger


class MemoryApi(NamedTuple):
    app: FastAPI
    client: TestClient  # sends `secret` unless other headers were asked for
    ledger: Ledger
    keys: MemoryKeyStore
    key_id: str  # the key made with the app: `role` of `tenant`
    secret: str

    def bearer(self, secret: str | None = None) -> dict[str, str]:
        """The Authorization header of `secret` (default: the app's first key)."""
        return {"Authorization": f"Bearer {secret or self.secret}"}


@contextmanager
def memory_api(
    *, tenant: str | None = None, role: str = "admin", headers: dict[str, str] | None = None,
    **settings: Any,
) -> Iterator[MemoryApi]:  # fmt: skip
    """The app on `memory://` with whitespace token counts and `settings`, and one key of
    `role` in `tenant` (default: the settings' default tenant); the client sends that
    key, or `headers` instead when given. The ledger is closed afterwards."""
    config = Settings(**{"database_url": "memory://", "tokenizer": "whitespace", **settings})
    ledger = open_ledger(config)
    keys = MemoryKeyStore()
    key_id, secret = keys.create(tenant or config.default_tenant, role)
    app = create_app(config, ledger=ledger, key_store=keys)
    sent = headers if headers is not None else {"Authorization": f"Bearer {secret}"}
    try:
        with TestClient(app, headers=sent) as client:
            yield MemoryApi(app, client, ledger, keys, key_id, secret)
    finally:
        ledger.close()
