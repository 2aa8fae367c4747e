"""The SQL limit stores: one table of buckets beside the ledger's, on SQLite or PostgreSQL.

A store call costs one round trip (most requests make none: their process admits them
from a lease, `ratelimit_lease.py`): on PostgreSQL one call of a function `migrate` creates,
which locks the request's rows (in scope order, so concurrent requests cannot deadlock),
settles them and writes them only if every bucket admits; on SQLite one short write
transaction on the ledger's file, shared by the processes of the host.
"""

from __future__ import annotations

import sqlite3
from abc import abstractmethod
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from typing import Any
from urllib.parse import unquote

from .ratelimit import LimitStore
from .ratelimit_budget import SLACK, Bucket, settle
from .sql_connections import SQLiteConnections, open_pool, postgres_cursor

TABLE = "ledger_rate_limits"
NOT_MIGRATED = "the rate limit table does not exist: run `session-ledger migrate`"
# Any constant works; it only has to be the same in every process.
ADVISORY_LOCK_ID = 0x5E5510_0002
COUNT = f"UPDATE {TABLE} SET level = level + 1 WHERE scope = ? AND level + 1 <= ?"
START = f"INSERT INTO {TABLE} (scope, level) VALUES (?, ?) ON CONFLICT (scope) DO NOTHING"
UNCOUNT = f"UPDATE {TABLE} SET level = level - 1 WHERE scope = ? AND level >= 1"

POSTGRES_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (scope TEXT PRIMARY KEY, level DOUBLE PRECISION NOT NULL)",
    # The same arithmetic as ratelimit.settle, where the rows are. A first look takes no
    # lock: a bucket's level only grows, so what it refuses a locked look refuses too,
    # and a refusal (a flood's usual answer) writes nothing and waits for no writer.
    f"""CREATE OR REPLACE FUNCTION ledger_rate_take(
        scopes TEXT[], steps DOUBLE PRECISION[], spans DOUBLE PRECISION[],
        at DOUBLE PRECISION) RETURNS DOUBLE PRECISION[] LANGUAGE plpgsql AS $$
    DECLARE
        moved DOUBLE PRECISION[] := steps;
        waits DOUBLE PRECISION[] := steps;
        found_level DOUBLE PRECISION;
        admitted BOOLEAN;
    BEGIN
        FOR locked IN 0 .. 1 LOOP
            admitted := TRUE;
            FOR i IN 1 .. cardinality(scopes) LOOP
                IF locked = 0 THEN
                    SELECT r.level INTO found_level FROM {TABLE} r WHERE r.scope = scopes[i];
                ELSE
                    INSERT INTO {TABLE} (scope, level) VALUES (scopes[i], at)
                        ON CONFLICT (scope) DO NOTHING;
                    SELECT r.level INTO found_level FROM {TABLE} r
                        WHERE r.scope = scopes[i] FOR UPDATE;
                END IF;
                moved[i] := GREATEST(COALESCE(found_level, at), at) + steps[i];
                waits[i] := moved[i] - spans[i] - at;
                IF waits[i] > {SLACK} THEN
                    admitted := FALSE;
                ELSE
                    waits[i] := 0;
                END IF;
            END LOOP;
            IF NOT admitted THEN
                RETURN waits;
            END IF;
        END LOOP;
        -- A bucket lost to a crash costs a burst, never a message: this transaction's
        -- commit need not wait for the WAL to reach the disk.
        PERFORM set_config('synchronous_commit', 'off', true);
        FOR i IN 1 .. cardinality(scopes) LOOP
            UPDATE {TABLE} SET level = moved[i] WHERE scope = scopes[i];
        END LOOP;
        RETURN waits;
    END $$""",
)


class _SQLLimitStore(LimitStore):
    """What both backends share: the session counts, written with `?` placeholders."""

    placeholder = "?"

    @abstractmethod
    def _transaction(self) -> AbstractContextManager[Any]:
        """A cursor inside one transaction."""

    def _sql(self, statement: str) -> str:
        return statement.replace("?", self.placeholder)

    def count(self, scope: str, limit: int, start: Callable[[], int]) -> bool:
        with self._transaction() as cur:
            cur.execute(self._sql(COUNT), (scope, limit))
            if cur.rowcount == 1:
                return True
            cur.execute(self._sql(f"SELECT 1 FROM {TABLE} WHERE scope = ?"), (scope,))
            if cur.fetchone() is not None:
                # At its limit, or begun by another process after the UPDATE looked (on
                # PostgreSQL each statement sees what committed before it): ask again.
                cur.execute(self._sql(COUNT), (scope, limit))
                return bool(cur.rowcount == 1)
        begun = start()  # outside a transaction: it reads the ledger, maybe for a while
        with self._transaction() as cur:
            cur.execute(self._sql(START), (scope, begun))
            cur.execute(self._sql(COUNT), (scope, limit))
            return bool(cur.rowcount == 1)

    def uncount(self, scope: str) -> None:
        with self._transaction() as cur:
            cur.execute(self._sql(UNCOUNT), (scope,))


class SQLiteLimitStore(_SQLLimitStore):
    """Buckets in the ledger's SQLite file, at most `pool_size` connections (as the key store)."""

    def __init__(self, database_url: str, *, lock_timeout: float = 30, pool_size: int = 8) -> None:
        self.path = unquote(database_url.removeprefix("sqlite:///"))
        # A bucket lost to a power cut costs a burst, never a message: these commits need
        # not wait for the disk. NORMAL, not OFF: in WAL mode a checkpoint this connection
        # runs still syncs, so the ledger's file stays whole.
        self.connections = SQLiteConnections(
            self.path, lock_timeout, pragmas=["PRAGMA synchronous = NORMAL"], size=pool_size
        )

    def migrate(self) -> None:
        with self._transaction() as cur:
            cur.execute(
                f"CREATE TABLE IF NOT EXISTS {TABLE} (scope TEXT PRIMARY KEY, level REAL NOT NULL)"
            )

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        scopes = [b.scope for b in buckets]
        read = f"SELECT scope, level FROM {TABLE} WHERE scope IN ({', '.join('?' * len(scopes))})"
        # A first look outside the write lock: a bucket's level only grows, so what it
        # refuses a look under the lock refuses too, and a refusal waits for no writer.
        with self._transaction(lock=False) as cur:
            cur.execute(read, scopes)
            _, waits = settle([dict(cur.fetchall()).get(s) for s in scopes], buckets, now)
        if any(waits):
            return waits
        with self._transaction() as cur:
            cur.execute(read, scopes)
            found = dict(cur.fetchall())
            moved, waits = settle([found.get(s) for s in scopes], buckets, now)
            if not any(waits):
                cur.executemany(
                    f"INSERT INTO {TABLE} (scope, level) VALUES (?, ?) "
                    "ON CONFLICT (scope) DO UPDATE SET level = excluded.level",
                    zip(scopes, moved, strict=True),
                )
        return waits

    def close(self) -> None:
        self.connections.close()

    def _transaction(self, lock: bool = True) -> AbstractContextManager[sqlite3.Cursor]:
        """A cursor in a transaction; `lock` (IMMEDIATE) takes the write lock before the
        read: two processes cannot both settle a bucket from the same level."""
        return self.connections.transaction(NOT_MIGRATED, lock=lock)


class PostgresLimitStore(_SQLLimitStore):
    """Buckets in PostgreSQL, through a small connection pool of their own."""

    placeholder = "%s"

    def __init__(self, database_url: str, *, pool_size: int = 4, lock_timeout: float = 30) -> None:
        # Autocommit: a request's one call is its own transaction, one round trip (no
        # BEGIN and COMMIT around it); `_transaction` opens one where several statements
        # must hold together.
        self.pool = open_pool(database_url, size=pool_size, wait=lock_timeout, autocommit=True)

    def migrate(self) -> None:
        with self._transaction() as cur:
            # CREATE ... IF NOT EXISTS can still collide in the catalog when two processes
            # run it at once; the advisory lock queues them instead.
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (ADVISORY_LOCK_ID,))
            for statement in POSTGRES_SCHEMA:
                cur.execute(statement)

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        ordered = sorted(range(len(buckets)), key=lambda i: buckets[i].scope)
        with self._transaction(single=True) as cur:
            cur.execute(
                "SELECT ledger_rate_take(%s, %s, %s, %s)",
                ([buckets[i].scope for i in ordered], [buckets[i].step for i in ordered],
                 [buckets[i].span for i in ordered], now),
            )  # fmt: skip
            row = cur.fetchone()
        waits = [0.0] * len(buckets)
        for position, wait in zip(ordered, row[0] if row else (), strict=True):
            waits[position] = float(wait)
        return waits

    def close(self) -> None:
        self.pool.close()

    def _transaction(self, single: bool = False) -> AbstractContextManager[Any]:
        """A cursor in a transaction; `single`: for one statement, its own transaction."""
        return postgres_cursor(self.pool, NOT_MIGRATED, transaction=not single)
