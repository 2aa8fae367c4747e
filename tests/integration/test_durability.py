"""Start-up refuses a store that can lose acknowledged writes, unless the settings accept it."""

from __future__ import annotations

import uuid
from pathlib import Path
from urllib.parse import urlsplit

import psycopg
import pytest

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.durability import UnsafeDurability, sqlite_durability_problems
from session_ledger.api.settings import Settings
from tests.conftest import make_settings
from tests.e2e.conftest import Server, server_env


def test_a_sqlite_file_in_wal_with_full_sync_is_accepted(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path)
    migrate(settings)
    assert sqlite_durability_problems(str(tmp_path / "ledger.db")) == []
    open_ledger(settings).close()


def test_sqlite_without_wal_is_refused_unless_accepted(tmp_path: Path) -> None:
    # A file system without the shared memory WAL needs: SQLite stays in rollback mode.
    url = f"sqlite:///file:{tmp_path / 'ledger.db'}?vfs=unix-dotfile"
    settings = Settings(database_url=url, tokenizer="whitespace")
    with pytest.raises(UnsafeDurability, match=r"journal_mode=delete.*ALLOW_UNSAFE_DURABILITY"):
        open_ledger(settings, create_tables=True)
    settings.allow_unsafe_durability = True
    ledger = open_ledger(settings, create_tables=True)
    ledger.put("s", {"role": "user", "content": "kept anyway"})
    ledger.close()


@pytest.fixture
def async_commit_url(fresh_postgres_url: str) -> str:
    """A database of its own whose sessions commit without waiting for the disk."""
    name = urlsplit(fresh_postgres_url).path.lstrip("/")
    with psycopg.connect(fresh_postgres_url, autocommit=True) as conn:
        conn.execute(f'ALTER DATABASE "{name}" SET synchronous_commit = off')
    return fresh_postgres_url


@pytest.mark.postgres
def test_postgres_with_synchronous_commit_off_is_refused_unless_accepted(
    async_commit_url: str,
) -> None:
    settings = Settings(database_url=async_commit_url, tokenizer="whitespace")
    with pytest.raises(UnsafeDurability, match="synchronous_commit=off"):
        migrate(settings)
    settings.allow_unsafe_durability = True
    migrate(settings)
    open_ledger(settings).close()
    settings.allow_unsafe_durability = False
    with pytest.raises(UnsafeDurability, match="synchronous_commit=off"):
        open_ledger(settings)


@pytest.mark.postgres
def test_serve_refuses_to_start_with_a_clear_message(async_commit_url: str) -> None:
    env = server_env(async_commit_url, LEDGER_BOOTSTRAP_KEY="sl_test_" + uuid.uuid4().hex)
    with pytest.raises(RuntimeError, match=r"refusing to start.*synchronous_commit=off") as err:
        Server(env).start()
    assert "Traceback" not in str(err.value)
    allowed = Server({**env, "LEDGER_ALLOW_UNSAFE_DURABILITY": "true"}).start()
    allowed.stop()
