"""Where rate limits' buckets and the tenants' session counts live: `LimitStore`, kept in
memory, on SQLite or on PostgreSQL (one table beside the ledger's). What a limit is
(budgets, refusals, the leases a process takes) is the API's (`api/ratelimit*.py`).

Buckets are kept by GCRA (the generic cell rate algorithm): a bucket's level is the
theoretical arrival time (TAT) of its next request, in seconds since the epoch, and
`settle` the arithmetic every store applies where its levels are.

A store call costs one round trip (most requests make none: their process admits them
from a lease, `api/ratelimit_lease.py`): on PostgreSQL one call of a function `migrate`
creates, which locks the request's rows (in scope order, so concurrent requests cannot
deadlock), settles them and writes them only if every bucket admits; on SQLite one short
write transaction on a file beside the ledger's, shared by the processes of the host. The session
counts run the same statements on both, through their dialect's `TableConnections`.
"""

from __future__ import annotations

import threading
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from .dialect import TableConnections
from .table_connections import PostgresTableConnections, SQLiteTableConnections

# GCRA sums float steps: ten steps of 0.1 s can exceed a span of 1 s by 2e-16.
SLACK = 1e-9
TABLE = "ledger_rate_limits"
NOT_MIGRATED = "the rate limit table does not exist: run `session-ledger migrate`"
# PostgreSQL's advisory lock of `migrate`: any constant works; it only has to be the same
# in every process.
LOCK_ID = 0x5E5510_0002
COUNT = f"UPDATE {TABLE} SET level = level + 1 WHERE scope = ? AND level + 1 <= ?"
START = f"INSERT INTO {TABLE} (scope, level) VALUES (?, ?) ON CONFLICT (scope) DO NOTHING"
UNCOUNT = f"UPDATE {TABLE} SET level = level - 1 WHERE scope = ? AND level >= 1"

SQLITE_SCHEMA = f"CREATE TABLE IF NOT EXISTS {TABLE} (scope TEXT PRIMARY KEY, level REAL NOT NULL)"
POSTGRES_SCHEMA = (
    f"CREATE TABLE IF NOT EXISTS {TABLE} (scope TEXT PRIMARY KEY, level DOUBLE PRECISION NOT NULL)",
    # The same arithmetic as `settle`, where the rows are. A first look takes no lock: a
    # bucket's level only grows, so what it refuses a locked look refuses too, and a
    # refusal (a flood's usual answer) writes nothing and waits for no writer.
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
# A bucket lost to a power cut costs a burst, never a message: the SQLite connections'
# commits need not wait for the disk. NORMAL, not OFF: in WAL mode a checkpoint such a
# connection runs still syncs, so the file stays whole.
SQLITE_PRAGMAS = ("PRAGMA synchronous = NORMAL",)


def sqlite_path(ledger_path: str) -> str:
    """The SQLite file of the buckets beside the ledger's: a file of its own, so that
    taking a bucket never waits for the ledger's write lock (another tenant's long write
    held it for seconds). Its rows are a process's budgets and the tenants' session
    counts, each counted again from the ledger when it is missing: nothing to back up."""
    return f"{ledger_path}-limits"


@dataclass(frozen=True)
class Bucket:
    """One budget as a request asks it: `step` and `span` in seconds of budget, and the
    `lease` a process may take of it at once (`api/ratelimit_lease.py`; 0: none)."""

    scope: str
    step: float
    span: float
    lease: float = 0.0


def settle(
    levels: Sequence[float | None], buckets: Sequence[Bucket], now: float
) -> tuple[list[float], list[float]]:
    """GCRA over every bucket of one request: the levels it would leave, and per bucket
    the seconds until it would admit the request (all 0: admitted)."""
    moved, waits = [], []
    for level, bucket in zip(levels, buckets, strict=True):
        after = max(level if level is not None else now, now) + bucket.step
        moved.append(after)
        wait = after - bucket.span - now
        waits.append(wait if wait > SLACK else 0.0)
    return moved, waits


class LimitStore(ABC):
    """Where buckets and session counts live; `migrate()` makes its table."""

    @abstractmethod
    def migrate(self) -> None: ...

    @abstractmethod
    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        """Charge every bucket, atomically and only if each admits; the waits of `settle`."""

    @abstractmethod
    def count(self, scope: str, limit: int, start: Callable[[], int]) -> bool:
        """Add one to the count at `scope` if it stays within `limit`; a count not kept
        yet begins at `start()`."""

    @abstractmethod
    def uncount(self, scope: str) -> None:
        """Take back one `count`."""

    def close(self) -> None:  # noqa: B027 - only the SQL stores hold connections
        """Release connections."""


class MemoryLimitStore(LimitStore):
    """Buckets in a dict: for `memory://` stores, which live in one process anyway."""

    def __init__(self) -> None:
        self._levels: dict[str, float] = {}
        self._lock = threading.Lock()

    def migrate(self) -> None:
        return None

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        with self._lock:
            moved, waits = settle([self._levels.get(b.scope) for b in buckets], buckets, now)
            if not any(waits):
                self._levels.update(zip([b.scope for b in buckets], moved, strict=True))
            return waits

    def count(self, scope: str, limit: int, start: Callable[[], int]) -> bool:
        begun = start() if scope not in self._levels else 0
        with self._lock:
            level = self._levels.setdefault(scope, begun)
            if level + 1 > limit:
                return False
            self._levels[scope] = level + 1
            return True

    def uncount(self, scope: str) -> None:
        with self._lock:
            self._levels[scope] = max(0.0, self._levels.get(scope, 0.0) - 1)


class SQLLimitStore(LimitStore):
    """What both SQL stores share: the session counts, through their dialect's connections."""

    def __init__(self, connections: TableConnections) -> None:
        self.connections = connections

    def close(self) -> None:
        self.connections.close()

    def count(self, scope: str, limit: int, start: Callable[[], int]) -> bool:
        conns = self.connections
        with conns.transaction(writes=True) as cur:
            conns.execute(cur, COUNT, (scope, limit))
            if cur.rowcount == 1:
                return True
            conns.execute(cur, f"SELECT 1 FROM {TABLE} WHERE scope = ?", (scope,))
            if cur.fetchone() is not None:
                # At its limit, or begun by another process after the UPDATE looked (on
                # PostgreSQL each statement sees what committed before it): ask again.
                conns.execute(cur, COUNT, (scope, limit))
                return bool(cur.rowcount == 1)
        begun = start()  # outside a transaction: it reads the ledger, maybe for a while
        with conns.transaction(writes=True) as cur:
            conns.execute(cur, START, (scope, begun))
            conns.execute(cur, COUNT, (scope, limit))
            return bool(cur.rowcount == 1)

    def uncount(self, scope: str) -> None:
        with self.connections.transaction(writes=True) as cur:
            self.connections.execute(cur, UNCOUNT, (scope,))


class SQLiteLimitStore(SQLLimitStore):
    """Buckets in a SQLite file beside the ledger's (`sqlite_path`; connections set up by
    SQLITE_PRAGMAS)."""

    def __init__(self, connections: SQLiteTableConnections) -> None:
        super().__init__(connections)

    def migrate(self) -> None:
        with self.connections.transaction(serial=True) as cur:
            cur.execute(SQLITE_SCHEMA)

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        scopes = [b.scope for b in buckets]
        read = f"SELECT scope, level FROM {TABLE} WHERE scope IN ({', '.join('?' * len(scopes))})"
        # A first look outside the write lock: a bucket's level only grows, so what it
        # refuses a look under the lock refuses too, and a refusal waits for no writer.
        with self.connections.transaction() as cur:
            cur.execute(read, scopes)
            _, waits = settle([dict(cur.fetchall()).get(s) for s in scopes], buckets, now)
        if any(waits):
            return waits
        # Under the write lock (BEGIN IMMEDIATE): two processes cannot both settle a
        # bucket from the same level.
        with self.connections.transaction(writes=True) as cur:
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


class PostgresLimitStore(SQLLimitStore):
    """Buckets in PostgreSQL, through a small autocommit pool of their own: a request's
    one call is its own transaction, one round trip (no BEGIN and COMMIT around it)."""

    connections: PostgresTableConnections

    def __init__(self, connections: PostgresTableConnections) -> None:
        super().__init__(connections)

    def migrate(self) -> None:
        with self.connections.transaction(serial=True) as cur:
            for statement in POSTGRES_SCHEMA:
                self.connections.execute(cur, statement)

    def take(self, buckets: Sequence[Bucket], now: float) -> list[float]:
        ordered = sorted(range(len(buckets)), key=lambda i: buckets[i].scope)
        with self.connections.statement() as cur:
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
