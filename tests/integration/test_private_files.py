"""The SQLite files a store is made of are its owner's alone (0600) under a umask that
would let everyone read them: the database, its -wal and -shm, the writers' lock file,
whoever makes the file first (the ledger, or the key or limit store); and the process's
umask is as it was."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import pytest

from session_ledger.api.bootstrap import open_key_store, open_limit_store
from session_ledger.projections.rate_limit_store import Bucket
from tests.conftest import make_ledger, make_settings

SUFFIXES = ("", "-wal", "-shm", "-writers")


@pytest.fixture
def lax_umask() -> Iterator[int]:
    """A umask that lets group and others read what the process makes (the usual 022)."""
    before = os.umask(0o022)
    try:
        yield 0o022
    finally:
        os.umask(before)


def modes(db: Path) -> dict[str, str]:
    return {p.name: oct(stat.S_IMODE(p.stat().st_mode)) for p in db.parent.iterdir()}


def current_umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_the_ledger_makes_its_files_0600(tmp_path: Path, lax_umask: int) -> None:
    settings = make_settings("sqlite", tmp_path)
    db = Path(settings.database_url.removeprefix("sqlite:///"))
    with make_ledger(settings) as ledger:
        ledger.put("s", {"role": "user", "content": "private"})
        found = modes(db)
    assert {db.name + s for s in SUFFIXES} <= found.keys()
    assert set(found.values()) == {"0o600"}, found
    assert current_umask() == lax_umask


@pytest.mark.parametrize("first", ["keys", "limits"])
def test_a_key_or_limit_store_that_makes_the_file_makes_it_0600(
    tmp_path: Path, lax_umask: int, first: str
) -> None:
    db = tmp_path / "ledger.db"
    url = f"sqlite:///{db}"
    if first == "keys":
        store = open_key_store(url)
        store.migrate()
        store.create("t", "agent")
    else:
        store = open_limit_store(url)  # type: ignore[assignment]
        store.migrate()
        store.take([Bucket("requests:key:k", 1.0, 10.0)], 1_000_000.0)  # type: ignore[attr-defined]
    try:
        found = modes(db)
    finally:
        store.close()
    assert (db.name if first == "keys" else f"{db.name}-limits") in found
    assert set(found.values()) == {"0o600"}, found
    assert current_umask() == lax_umask
