"""Scratch PostgreSQL databases: one per store instance, dropped when the run ends.

A database of its own keeps every store's tables (and session-ledger's, whose
names the library derives) away from the test suites that share the server.
"""

from __future__ import annotations

import contextlib
import itertools
import os
from collections.abc import Iterator
from urllib.parse import urlsplit, urlunsplit

import psycopg

DEFAULT_URL = "postgresql://postgres@127.0.0.1:5432/test"


def server_url() -> str:
    return os.environ.get("LEDGER_BENCH_POSTGRES_URL", DEFAULT_URL)


class ScratchDatabases:
    """Creates `<prefix>_<pid>_<n>_<tag>` databases on the server named by `base_url`
    (prefix: LEDGER_BENCH_DB_PREFIX, default `bench`: a shared server's databases say
    whose they are)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self.created: list[str] = []
        self._numbers = itertools.count()

    def reachable(self) -> str | None:
        """None when the server answers, else why not."""
        try:
            with psycopg.connect(self.base_url, connect_timeout=5) as conn:
                conn.execute("SELECT 1")
        except psycopg.Error as exc:
            return str(exc).strip()
        return None

    def _admin(self) -> psycopg.Connection[tuple[object, ...]]:
        return psycopg.connect(self.base_url, autocommit=True)

    def create(self, tag: str) -> str:
        prefix = os.environ.get("LEDGER_BENCH_DB_PREFIX", "bench")
        name = f"{prefix}_{os.getpid()}_{next(self._numbers)}_{tag}".lower()
        with self._admin() as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        self.created.append(name)
        parts = urlsplit(self.base_url)
        return urlunsplit(parts._replace(path=f"/{name}"))

    def drop(self, url: str) -> None:
        name = urlsplit(url).path.lstrip("/")
        with self._admin() as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        if name in self.created:
            self.created.remove(name)

    def drop_all(self) -> None:
        for name in list(self.created):
            with self._admin() as conn:
                conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            self.created.remove(name)


@contextlib.contextmanager
def scratch_database(tag: str, base_url: str | None = None) -> Iterator[str]:
    """One scratch database's URL for the `with` block; dropped after it, however it ends."""
    databases = ScratchDatabases(base_url or server_url())
    url = databases.create(tag)
    try:
        yield url
    finally:
        databases.drop(url)
