"""Composition root: settings -> store -> Ledger. The only place that names a backend."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlsplit

import psycopg

from session_ledger.domain.errors import InvalidInput, StoreNotReady
from session_ledger.domain.ledger import Ledger, Limits
from session_ledger.domain.observer import SILENT, LedgerObserver
from session_ledger.domain.tokens import load_tokenizer
from session_ledger.projections import api_key_table, rate_limit_store
from session_ledger.projections.api_key_table import (
    MemoryKeyTable,
    PostgresKeyTable,
    SQLiteKeyTable,
)
from session_ledger.projections.driver_errors import POSTGRES
from session_ledger.projections.postgres_partitions import partition
from session_ledger.projections.postgres_schema import layout as postgres_layout
from session_ledger.projections.rate_limit_store import (
    LimitStore,
    MemoryLimitStore,
    PostgresLimitStore,
    SQLiteLimitStore,
)
from session_ledger.projections.sqlite import sqlite_layout
from session_ledger.projections.table_connections import (
    Notices,
    PostgresTableConnections,
    SQLiteTableConnections,
)
from session_ledger.projections.views import SQLViews

from .durability import postgres_durability_problems, refuse_unsafe, sqlite_durability_problems
from .keystore import KeyStore
from .settings import ReplicaSettings, Settings, StoreSettings

SQLITE_FACTORY = "session_ledger.projections.sqlite:SQLiteLedgerFactory"
POSTGRES_FACTORY = "session_ledger.projections.postgres:PostgresLedgerFactory"
MIGRATE_LOCK_ID = 0x5E551017  # pg_advisory_lock key: one migrate at a time per database


def store_env(settings: Settings, *, create_tables: bool) -> dict[str, str]:
    """The eventsourcing environment for the store named by `settings.database_url`."""
    url = settings.database_url
    if settings.read_database_urls.strip() and not url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("LEDGER_READ_DATABASE_URLS needs a PostgreSQL LEDGER_DATABASE_URL")
    common = {
        **master_keys_env(settings),
        "AGGREGATE_CACHE_MAXSIZE": str(settings.aggregate_cache_size or ""),
        "AGGREGATE_CACHE_FASTFORWARD": "n",  # the Ledger reloads on a failed save instead
        "CREATE_TABLE": "y" if create_tables else "n",
    }
    if url.startswith("memory://"):
        name = f"file:ledger-{uuid.uuid4().hex}?mode=memory&cache=shared"
        return {**common, "PERSISTENCE_MODULE": SQLITE_FACTORY, "SQLITE_DBNAME": name,
                "CREATE_TABLE": "y"}  # fmt: skip
    if url.startswith("sqlite:///"):
        path = Path(unquote(url.removeprefix("sqlite:///")))
        return {
            **common,
            "PERSISTENCE_MODULE": SQLITE_FACTORY,
            "SQLITE_DBNAME": str(path),
            "SQLITE_LOCK_TIMEOUT": str(settings.lock_timeout_seconds),
        }
    if url.startswith(("postgresql://", "postgres://")):
        parts = urlsplit(url)
        return {
            **common,
            "PERSISTENCE_MODULE": POSTGRES_FACTORY,
            "POSTGRES_DBNAME": unquote(parts.path.lstrip("/")) or "postgres",
            "POSTGRES_HOST": parts.hostname or "127.0.0.1",
            "POSTGRES_PORT": str(parts.port or 5432),
            "POSTGRES_USER": unquote(parts.username or "postgres"),
            "POSTGRES_PASSWORD": unquote(parts.password or ""),
            # One connection kept open, as many more as calls need, to LEDGER_POOL_SIZE in
            # all (the library's pool keeps POOL_SIZE open and adds MAX_OVERFLOW, 10 unless
            # told): an idle process holds one, not a pool's worth.
            "POSTGRES_POOL_SIZE": "1",
            "POSTGRES_MAX_OVERFLOW": str(settings.pool_size - 1),
            "POSTGRES_LOCK_TIMEOUT": str(settings.lock_timeout_seconds),
            # The library's name for how long a call waits for a pooled connection.
            "POSTGRES_CONNECT_TIMEOUT": str(settings.store_wait_seconds),
            **({} if create_tables else replica_env(settings)),
        }
    raise InvalidInput(
        f"unsupported database URL {url!r}: use memory://, sqlite:///path or postgresql://..."
    )


def replica_env(settings: ReplicaSettings) -> dict[str, str]:
    """The read replicas' part of the store's environment (projections/replicas.py)."""
    urls = [u.strip() for u in settings.read_database_urls.split(",") if u.strip()]
    for url in urls:
        if not url.startswith(("postgresql://", "postgres://")):
            raise InvalidInput(
                f"LEDGER_READ_DATABASE_URLS: {redact(url)!r} is no postgresql:// URL"
            )
    if not urls:
        return {}
    return {
        "READ_REPLICA_URLS": ",".join(urls),
        "REPLICA_MAX_LAG_SECONDS": str(settings.replica_max_lag_seconds),
        "REPLICA_WAIT_MS": str(settings.replica_wait_ms),
        "REPLICA_CHECK_SECONDS": str(settings.replica_check_seconds),
    }


def master_keys_env(settings: StoreSettings) -> dict[str, str]:
    """`MASTER_KEYS` for the store (sealing.py) from `master_key` or `master_key_file`."""
    if settings.master_key and settings.master_key_file:
        raise InvalidInput("set LEDGER_MASTER_KEY or LEDGER_MASTER_KEY_FILE, not both")
    text = settings.master_key
    if settings.master_key_file:
        try:
            text = Path(settings.master_key_file).read_text(encoding="ascii")
        except OSError as e:
            raise StoreNotReady(f"cannot read the master key file: {e}") from None
    return {"MASTER_KEYS": text.strip()} if text and text.strip() else {}


def open_ledger(
    settings: Settings, *, create_tables: bool = False, auto_migrate: bool | None = None,
    serving: bool = False, observer: LedgerObserver = SILENT,
) -> Ledger:  # fmt: skip
    """A Ledger on the configured store, telling `observer` of its store calls and writes.

    `serving`: the ledger of a server, whose event loop other requests wait on: a long
    message is token-counted in a worker process (`token_count_process_chars`). A ledger
    in a host's process starts no process of its own.

    A store with no ledger tables yet gets them on first use (`migrate`, under its lock)
    when `auto_migrate` (default: `settings.auto_migrate`); otherwise, and for tables of
    an older layout, which only an explicit `migrate` moves, it raises `StoreNotReady`.
    A `memory://` store is new each time, so it always makes its tables."""
    create_tables = create_tables or settings.database_url.startswith("memory://")
    env = store_env(settings, create_tables=create_tables)
    if not create_tables:
        layout = _layout(settings, env)
        if layout == "none" and (settings.auto_migrate if auto_migrate is None else auto_migrate):
            migrate(settings)
        elif layout != "current":
            raise StoreNotReady(
                f"the store at {redact(settings.database_url)} has no ledger tables, or those "
                "of an older layout: run `session-ledger migrate` first"
            )
    if not settings.database_url.startswith("memory://"):
        check_durability(settings, env)
    return Ledger(
        env,
        tokenizer=load_tokenizer(
            settings.tokenizer,
            process_min_chars=settings.token_count_process_chars if serving else 0,
        ),
        limits=Limits(
            max_message_bytes=settings.max_message_bytes,
            max_messages_per_write=settings.max_messages_per_write,
            max_write_bytes=settings.max_write_bytes,
            max_provenance_bytes=settings.max_provenance_bytes,
            max_page_messages=settings.max_page_messages,
            max_answer_bytes=settings.max_answer_bytes,
        ),
        default_tenant=settings.default_tenant,
        token_limit=settings.token_limit,
        write_retries=settings.write_retries,
        snapshot_interval=settings.snapshot_interval,
        stream_flush_bytes=settings.stream_flush_bytes,
        stream_flush_ms=settings.stream_flush_ms,
        observer=observer,
    )


_shared: dict[str, Ledger] = {}
_shared_lock = threading.Lock()


def shared_ledger(url: str) -> Ledger:
    """The one Ledger of this process on database `url`, opened on first use with the
    other settings from the `LEDGER_*` environment (its tables must exist unless
    auto-migrate is on): what an agent SDK adapter given `url=` writes through, so that
    its sessions and any other on the same database share one ledger and its cache.
    InvalidInput for memory://, which would name a new empty store each time."""
    if url.startswith("memory://"):
        raise InvalidInput(
            "memory:// names a new empty store each time: pass the Ledger itself (ledger=)"
        )
    with _shared_lock:
        if url not in _shared:
            _shared[url] = open_ledger(Settings(database_url=url))
        return _shared[url]


def reads_in_process(ledger: Ledger) -> bool:
    """Whether the ledger's short reads run in this process without waiting on a server
    (SQLite: a read is CPU on a local file, so a worker thread would only add its
    hand-off); PostgreSQL's wait on the network and on the pool, off the event loop."""
    from session_ledger.projections.sqlite import SQLiteLedgerRecorder

    return isinstance(ledger.recorder, SQLiteLedgerRecorder)


def store_bridged(ledger: Ledger) -> bool:
    """Whether the ledger's short reads, and a write alone, run on the event loop with
    their waits awaited (projections/async_bridge.py): PostgreSQL, read from its primary.
    With standbys (LEDGER_READ_DATABASE_URLS) they stay in worker threads: the reads'
    routing may pause for a standby to catch up."""
    from session_ledger.projections.postgres import PostgresLedgerRecorder

    return isinstance(ledger.recorder, PostgresLedgerRecorder) and ledger.views.read_routing is None


def sql_views(ledger: Ledger) -> SQLViews:
    """The ledger's views as the SQL stores make them, whose rows `rebuild` and `check`
    derive again in the store's own dialect (the one place the port is narrowed)."""
    views = ledger.views
    if not isinstance(views, SQLViews):
        raise TypeError(f"{type(views).__name__} are not views of an SQL store")
    return views


def migrate(settings: Settings) -> None:
    """Create every table of the store. Safe to run from many processes at once.

    With `settings.partitions` (PostgreSQL only), the events and the views kept per
    session are then laid out in that many hash partitions, copying the rows of a store
    laid out otherwise (projections/postgres_partitions.py)."""
    url = settings.database_url
    if settings.partitions and not url.startswith(("postgresql://", "postgres://")):
        raise InvalidInput("partitions (LEDGER_PARTITIONS) apply to a PostgreSQL store only")
    if url.startswith("memory://"):
        return
    if url.startswith("sqlite:///"):
        Path(store_env(settings, create_tables=True)["SQLITE_DBNAME"]).parent.mkdir(
            parents=True, exist_ok=True
        )
        open_ledger(settings, create_tables=True).close()
        _migrate_api_tables(settings)
        return
    # CREATE TYPE / CREATE TABLE race between processes; the advisory lock orders them.
    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", (MIGRATE_LOCK_ID,))
        try:
            open_ledger(settings, create_tables=True).close()
            if settings.partitions:
                with conn.transaction(), conn.cursor() as cursor:
                    partition(cursor, settings.partitions)
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", (MIGRATE_LOCK_ID,))
    _migrate_api_tables(settings)


def open_key_store(
    database_url: str, *, pool_size: int = 4, lock_timeout: float = 30, connect_wait: float = 30
) -> KeyStore:
    """The key store for the same URL the ledger uses, with at most `pool_size`
    connections; on PostgreSQL a request waits at most `connect_wait` seconds for a
    connection (then 503), rather than holding the request through an outage."""
    if database_url.startswith("memory://"):
        return KeyStore(MemoryKeyTable())
    if database_url.startswith("sqlite:///"):
        return KeyStore(SQLiteKeyTable(SQLiteTableConnections(
            _sqlite_path(database_url), lock_timeout, api_key_table.NOT_MIGRATED,
            size=pool_size,
        )))  # fmt: skip
    if database_url.startswith(("postgresql://", "postgres://")):
        notices = Notices(database_url, api_key_table.NOTIFY_CHANNEL)
        connections = PostgresTableConnections(
            database_url, api_key_table.NOT_MIGRATED, size=pool_size, wait=connect_wait,
            lock_id=api_key_table.LOCK_ID,
        )  # fmt: skip
        return KeyStore(PostgresKeyTable(connections, notices))
    raise InvalidInput(f"unsupported database URL {database_url.split(':', 1)[0]!r}")


def open_limit_store(
    database_url: str, *, pool_size: int = 4, lock_timeout: float = 30
) -> LimitStore:
    """The limit store for the same URL the ledger uses, with at most `pool_size`
    connections. On SQLite a file of its own beside the ledger's (`<database>-limits`):
    in the ledger's file a request that took a bucket waited for the write lock behind
    any tenant's long write."""
    if database_url.startswith("memory://"):
        return MemoryLimitStore()
    if database_url.startswith("sqlite:///"):
        return SQLiteLimitStore(SQLiteTableConnections(
            rate_limit_store.sqlite_path(_sqlite_path(database_url)), lock_timeout,
            rate_limit_store.NOT_MIGRATED,
            rate_limit_store.SQLITE_PRAGMAS, size=pool_size,
        ))  # fmt: skip
    if database_url.startswith(("postgresql://", "postgres://")):
        return PostgresLimitStore(PostgresTableConnections(
            database_url, rate_limit_store.NOT_MIGRATED, size=pool_size, wait=lock_timeout,
            lock_id=rate_limit_store.LOCK_ID, autocommit=True,
        ))  # fmt: skip
    raise InvalidInput(f"unsupported database URL {database_url.split(':', 1)[0]!r}")


def _sqlite_path(database_url: str) -> str:
    return unquote(database_url.removeprefix("sqlite:///"))


def _migrate_api_tables(settings: Settings) -> None:
    """The API key and rate limit tables live beside the ledger's (each takes its own
    lock)."""
    for opener in (open_key_store, open_limit_store):
        store = opener(settings.database_url, pool_size=1,
                       lock_timeout=settings.lock_timeout_seconds)  # fmt: skip
        try:
            store.migrate()
        finally:
            store.close()


def _layout(settings: Settings, env: dict[str, str]) -> str:
    """The store's tables: `none` yet, `current`, or `older` (a layout `migrate` moves)."""
    if env["PERSISTENCE_MODULE"] == SQLITE_FACTORY:
        return sqlite_layout(env["SQLITE_DBNAME"])
    with reached(settings.database_url, 10) as conn:
        return postgres_layout(conn.cursor())


@contextmanager
def reached(database_url: str, timeout: float) -> Iterator[psycopg.Connection[Any]]:
    """A connection to the PostgreSQL store, or StoreNotReady naming it at once (a pool
    would try again until its wait is over)."""
    try:
        with psycopg.connect(database_url, connect_timeout=max(1, round(timeout))) as conn:
            yield conn
    except POSTGRES.lost as e:
        raise StoreNotReady(f"cannot reach {redact(database_url)}: {e}") from None


def check_durability(settings: Settings, env: dict[str, str]) -> None:
    """UnsafeDurability when the store can lose acknowledged writes (durability.py)."""
    if env["PERSISTENCE_MODULE"] == SQLITE_FACTORY:
        store, problems = "SQLite", sqlite_durability_problems(env["SQLITE_DBNAME"])
    else:
        store = "PostgreSQL"
        problems = postgres_durability_problems(settings.database_url, settings.store_wait_seconds)
    refuse_unsafe(store, problems, settings.allow_unsafe_durability)


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return parts._replace(netloc=netloc).geturl()
    return url
