"""The API key store on every backend: one contract, plus races on a fresh store."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import open_key_store
from session_ledger.api.keystore import KeyNotFound, KeyStore
from session_ledger.domain.errors import InvalidInput, StoreNotReady
from tests.conftest import fresh_postgres_database

POSTGRES = pytest.param("postgres", marks=pytest.mark.postgres)


def _url(kind: str, tmp_path: Path, stack: ExitStack) -> str:
    if kind == "memory":
        return "memory://"
    if kind == "sqlite":
        return f"sqlite:///{tmp_path / 'keys.db'}"
    return stack.enter_context(fresh_postgres_database("ledger_keys"))


@pytest.fixture(params=["memory", "sqlite", POSTGRES])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A URL naming a fresh, empty store of each kind."""
    with ExitStack() as stack:
        yield _url(request.param, tmp_path, stack)


@pytest.fixture(params=["sqlite", POSTGRES])
def shared_store_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """A fresh store that several processes can share (not memory://)."""
    with ExitStack() as stack:
        yield _url(request.param, tmp_path, stack)


@pytest.fixture
def store(store_url: str) -> Iterator[KeyStore]:
    opened = open_key_store(store_url)
    opened.migrate()
    yield opened
    opened.close()


def test_a_created_key_authenticates_until_revoked(store: KeyStore) -> None:
    record, secret = store.create("acme", "agent", "bot")
    found = store.authenticate(secret)
    assert found is not None and (found.id, found.tenant, found.role) == (
        record.id,
        "acme",
        "agent",
    )
    assert store.authenticate(secret + "x") is None
    assert store.authenticate("") is None
    revoked = store.revoke(record.id)
    assert revoked.revoked_at is not None
    assert store.authenticate(secret) is None
    assert store.revoke(record.id).revoked_at == revoked.revoked_at  # the first time stays


def test_secrets_are_never_stored(store: KeyStore) -> None:
    _, secret = store.create("acme", "admin")
    (record,) = store.list()
    assert secret not in repr(record) and record.key_hash != secret
    assert len(record.key_hash) == 64  # sha256 hex


def test_lists_and_revocations_are_per_tenant(store: KeyStore) -> None:
    a, _ = store.create("tenant-a", "agent")
    b, _ = store.create("tenant-b", "auditor")
    assert [r.id for r in store.list("tenant-a")] == [a.id]
    assert {r.id for r in store.list()} == {a.id, b.id}
    with pytest.raises(KeyNotFound):
        store.revoke(a.id, "tenant-b")
    with pytest.raises(KeyNotFound):
        store.revoke("no-such-key")
    assert store.list("tenant-a")[0].revoked_at is None


@pytest.mark.parametrize(
    ("tenant", "role", "name"),
    [("t", "root", ""), ("", "agent", ""), ("t\n", "agent", ""), ("t", "agent", "a\x00"),
     ("x" * 129, "agent", ""), ("t", "agent", "n" * 201)],
)  # fmt: skip
def test_bad_fields_are_refused(store: KeyStore, tenant: str, role: str, name: str) -> None:
    with pytest.raises(InvalidInput):
        store.create(tenant, role, name)
    assert store.list() == []


def test_the_first_admin_is_made_once_from_a_given_or_a_fresh_secret(store: KeyStore) -> None:
    with pytest.raises(InvalidInput):
        store.ensure_admin("default", "too-short")
    given = "a-bootstrap-key-long-enough-0123"
    assert store.ensure_admin("default", given) == given
    assert store.ensure_admin("default", given) is None
    assert store.ensure_admin("default") is None
    found = store.authenticate(given)
    assert found is not None and found.role == "admin"


def test_racing_servers_make_one_first_admin(shared_store_url: str) -> None:
    """Separate stores with their own connections, as separate server processes have."""
    stores = [open_key_store(shared_store_url) for _ in range(6)]
    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            list(pool.map(lambda s: s.migrate(), stores))
            secrets = list(pool.map(lambda s: s.ensure_admin("default"), stores))
        assert sum(secret is not None for secret in secrets) == 1
        assert [r.role for r in stores[0].list()] == ["admin"]
    finally:
        for s in stores:
            s.close()


def test_racing_servers_read_one_feed_cursor_secret(shared_store_url: str) -> None:
    """The secret the tenant tail's cursors are sealed with (feed_cursors.py) is made
    once per store: every process of it reads the same."""
    stores = [open_key_store(shared_store_url) for _ in range(6)]
    try:
        with ThreadPoolExecutor(len(stores)) as pool:
            list(pool.map(lambda s: s.migrate(), stores))
            read = set(pool.map(lambda s: s.feed_cursor_secret(), stores))
        assert len(read) == 1 and len(read.pop()) == 64  # 32 random bytes, hex
        stores[0].migrate()
        assert stores[0].feed_cursor_secret() == stores[1].feed_cursor_secret()
    finally:
        for s in stores:
            s.close()


def test_a_feed_cursor_secret_is_not_derived_from_the_settings(tmp_path: Path) -> None:
    """A store made again at the same path, or two in memory, get secrets of their own."""
    url = f"sqlite:///{tmp_path / 'keys.db'}"
    made: list[str] = []
    for _ in range(2):
        store = open_key_store(url)
        try:
            store.migrate()
            made.append(store.feed_cursor_secret())
        finally:
            store.close()
        (tmp_path / "keys.db").unlink()
    memory = [open_key_store("memory://").feed_cursor_secret() for _ in range(2)]
    assert len({*made, *memory}) == 4
    assert not {*made, *memory} & {url, "memory://"}


def test_an_unmigrated_store_is_not_ready(shared_store_url: str) -> None:
    fresh = open_key_store(shared_store_url, lock_timeout=2)
    try:
        calls = (fresh.ping, lambda: fresh.authenticate("x"), fresh.list, fresh.feed_cursor_secret)
        for call in calls:
            with pytest.raises(StoreNotReady, match="migrate"):
                call()
    finally:
        fresh.close()


def test_an_active_key_is_held_in_the_process_until_revoked(store: KeyStore) -> None:
    record, secret = store.create("acme", "agent")
    assert store.cached(secret) is None  # never read yet
    assert store.authenticate(secret) == record
    _wait_for_notices(store)
    store.authenticate(secret)
    assert store.cached(secret) == record  # answered without a lookup
    assert store.cached(secret + "x") is None
    store.revoke(record.id)
    assert store.cached(secret) is None and store.authenticate(secret) is None


def test_a_revoke_in_one_process_drops_the_key_cached_in_another(shared_store_url: str) -> None:
    """Two stores with their own connections, as two server processes have."""
    admin, serving = open_key_store(shared_store_url), open_key_store(shared_store_url)
    try:
        admin.migrate()
        record, secret = admin.create("acme", "agent")
        other, other_secret = admin.create("acme", "agent")
        _wait_for_notices(serving)
        for s in (secret, other_secret):
            serving.authenticate(s)
        assert serving.cached(secret) == record
        admin.revoke(record.id)
        _wait_until(lambda: serving.cached(other_secret) is None)  # PostgreSQL: its NOTIFY
        assert serving.authenticate(secret) is None
        assert serving.authenticate(other_secret) == other  # looked up again, still active
    finally:
        admin.close()
        serving.close()


def _wait_for_notices(store: KeyStore) -> None:
    """PostgreSQL's store trusts cached keys only once it LISTENs for revokes."""
    notices = getattr(store, "notices", None)
    if notices is not None:
        _wait_until(lambda: notices.version is not None)


def _wait_until(condition: Callable[[], bool], seconds: float = 10) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the wait"
        time.sleep(0.01)
