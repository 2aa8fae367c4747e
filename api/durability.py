"""Start-up refuses a store that can lose acknowledged writes, unless told to accept it.

A write is acknowledged once its COMMIT returns. PostgreSQL with `fsync`, `full_page_writes`
or `synchronous_commit` off, or a SQLite file that is not in WAL mode with
`synchronous=FULL` (a filesystem without the shared memory WAL needs, say), may lose such a
write in a crash or a power cut. `LEDGER_ALLOW_UNSAFE_DURABILITY=true` accepts that.
"""

from __future__ import annotations

import sqlite3

import psycopg

from session_ledger.domain.errors import LedgerError, StoreNotReady
from session_ledger.projections.driver_errors import POSTGRES
from session_ledger.projections.sqlite_files import create_private

# The server settings whose values lose committed writes in a crash.
POSTGRES_UNSAFE = {
    "fsync": {"off"},
    "full_page_writes": {"off"},
    "synchronous_commit": {"off"},
}
ALLOW = "set LEDGER_ALLOW_UNSAFE_DURABILITY=true to accept losing acknowledged writes"


class UnsafeDurability(LedgerError):
    """The store may lose acknowledged writes, and the settings do not accept that."""

    code = "unsafe_durability"


def postgres_durability_problems(database_url: str, connect_timeout: int = 10) -> list[str]:
    """What in this server's settings (as this user and database see them) loses writes."""
    try:
        with psycopg.connect(database_url, connect_timeout=connect_timeout) as conn:
            found = {
                name: str(conn.execute(f"SHOW {name}").fetchone()[0])  # type: ignore[index]
                for name in POSTGRES_UNSAFE
            }
    except POSTGRES.lost as exc:
        raise StoreNotReady(f"cannot check the store's durability settings: {exc}") from None
    return [f"{name}={value}" for name, value in found.items() if value in POSTGRES_UNSAFE[name]]


def sqlite_durability_problems(db_name: str) -> list[str]:
    """What keeps this SQLite file from WAL with synchronous=FULL, as the ledger opens it."""
    create_private(db_name)
    with sqlite3.connect(db_name, uri=True) as conn:
        mode = str(conn.execute("PRAGMA journal_mode=WAL").fetchone()[0]).lower()
        conn.execute("PRAGMA synchronous=FULL")
        synchronous = int(conn.execute("PRAGMA synchronous").fetchone()[0])
    conn.close()
    problems = [] if mode == "wal" else [f"journal_mode={mode} (WAL is not available here)"]
    if synchronous < 2:  # 2 is FULL, 3 EXTRA
        problems.append(f"synchronous={synchronous} (FULL is not available here)")
    return problems


def refuse_unsafe(store: str, problems: list[str], allowed: bool) -> None:
    """UnsafeDurability naming the problems, unless there are none or they are allowed."""
    if problems and not allowed:
        raise UnsafeDurability(
            f"refusing to start: the {store} store can lose acknowledged writes "
            f"({', '.join(problems)}); fix its settings, or {ALLOW}"
        )
