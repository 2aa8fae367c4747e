"""Read replicas: PostgreSQL standbys serve the ledger's queries, and read-your-writes
holds.

A query goes to a standby in rotation (in turn). One that must see a version the
standby may not have replayed yet (one the caller holds, `min_version`, an ETag; or one
this process wrote) is answered by the standby if its answer shows that version or a
later one (a point-in-time query checks the standby's version of the session first);
else the standby's version is waited for a bounded time (`wait`), and if it does not
come, the primary answers. A query of no
session (the keys) goes to a standby only if it holds every write this process made. A
standby that fails a query is taken out of the rotation and the primary answers; the
monitor (`replica_health.py`) puts it back. Writes never come here: the recorder writes
on the primary.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from eventsourcing.persistence import PersistenceError
from eventsourcing.postgres import PostgresDatastore
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from session_ledger.domain.errors import StoreUnavailable
from session_ledger.domain.ports import SessionViews, T

from .replica_health import ReplicaMonitor, Standby, take_out

OWN_WRITES_KEPT = 100_000  # sessions whose version this process wrote, newest kept
POOL_WAIT_SECONDS = 1.0  # a standby that hands out no connection within this: the primary
# The defaults of a store's environment that names none (the API's settings take them).
MAX_LAG_SECONDS = 5.0  # a standby further behind serves no reads until it catches up
WAIT_MS = 100  # a read's wait for a standby to replay the version it must see
CHECK_SECONDS = 1.0  # how often each standby's lag and health are checked


@dataclass(frozen=True)
class ReplicaStatus:
    """What `status()` tells of one standby."""

    name: str
    serving: bool
    lag_seconds: float | None
    problem: str | None


class ReplicaSet:
    """The read routing (domain `ReadRouting`) over one primary's standbys."""

    def __init__(
        self, primary: SessionViews, primary_conninfo: str, urls: list[str],
        make_views: Callable[[str], Any], *, max_lag: float, wait: float, interval: float,
    ) -> None:  # fmt: skip
        self.primary = primary
        self.wait = wait
        self._make_views = make_views
        self.standbys = [Standby(redact(u), u, make_views(u)) for u in urls]
        self._turn = 0
        self._lock = threading.Lock()
        self._own: dict[uuid.UUID, tuple[int, float]] = {}  # session -> (version, when)
        self._last_write = -1.0
        self.monitor = ReplicaMonitor(primary_conninfo, self.standbys, max_lag=max_lag,
                                      interval=interval, renew=self._renew)  # fmt: skip
        self.monitor.start()

    # -- the routing ------------------------------------------------------------------------

    def read(
        self, session_id: uuid.UUID | None, min_version: int, query: Callable[[SessionViews], T],
        version: Callable[[T], int] | None = None,
    ) -> T:  # fmt: skip
        for _ in self.standbys:
            standby = self._next()
            if standby is None:
                break
            views = standby.views
            try:
                needed = self._needed(standby, session_id, min_version)
                if needed is None:
                    break  # it may lack this process's writes: the primary answers
                if needed and version is not None:  # read first: mostly it holds the version
                    result = query(views)
                    if version(result) >= needed:
                        return result
                if needed and not self._reached(views, session_id, needed):
                    break  # it trails: the primary answers
                return query(views)
            except (PersistenceError, StoreUnavailable) as e:
                if standby.views is views:  # not one the monitor has renewed meanwhile
                    take_out(standby, f"a read failed: {str(e).strip()}", broken=True)
        return query(self.primary)

    def written(self, session_id: uuid.UUID, version: int) -> None:
        """Told by the recorder after each commit: reads of this process must see it."""
        now = time.monotonic()
        with self._lock:
            self._own.pop(session_id, None)
            self._own[session_id] = (version, now)
            if len(self._own) > OWN_WRITES_KEPT:
                del self._own[next(iter(self._own))]
            self._last_write = now

    def _next(self) -> Standby | None:
        serving = [s for s in self.standbys if s.serving]
        if not serving:
            return None
        self._turn += 1  # a lost increment between threads only skews the turns
        return serving[self._turn % len(serving)]

    def _needed(
        self, standby: Standby, session_id: uuid.UUID | None, min_version: int
    ) -> int | None:
        """The version of the session `standby` must show for the query (0: any; None: a
        query of no session that it cannot serve)."""
        if session_id is None:
            return 0 if self._last_write < standby.covered_until else None
        own_version, written_at = self._own.get(session_id, (0, 0.0))
        if own_version >= min_version and written_at < standby.covered_until:
            return 0  # it replayed this process's write, which the caller's is not past
        return max(min_version, own_version)

    def _reached(self, views: Any, session_id: uuid.UUID | None, needed: int) -> bool:
        """Whether the standby's version of the session reaches `needed` within `wait`."""
        assert session_id is not None
        deadline = time.monotonic() + self.wait
        pause = 0.001
        while views.head_version(session_id) < needed:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            time.sleep(min(pause, left))
            pause = min(pause * 2, 0.016)
        return True

    # -- life -------------------------------------------------------------------------------

    def status(self) -> list[ReplicaStatus]:
        return [ReplicaStatus(s.name, s.serving, s.lag_seconds, s.problem) for s in self.standbys]

    def _renew(self, standby: Standby) -> None:
        """A fresh pool for a standby that answers again (its old connections are gone)."""
        old, standby.views = standby.views, self._make_views(standby.url)
        old.close()

    def close(self) -> None:
        self.monitor.close()
        for standby in self.standbys:
            standby.views.close()


def redact(url: str) -> str:
    """A connection string without its password."""
    params = conninfo_to_dict(url)
    params.pop("password", None)
    return make_conninfo("", **{k: v for k, v in params.items() if v is not None})


def open_replicas(
    env: Mapping[str, str], primary: SessionViews,
    standby_views: Callable[[PostgresDatastore], SessionViews], *, pool_size: int,
) -> ReplicaSet | None:  # fmt: skip
    """The standbys named in the environment (`READ_REPLICA_URLS`, comma separated) of the
    views `primary` (None: no standbys), each with views that `standby_views` makes on a
    datastore of at most `pool_size` connections (the primary's), one kept open."""
    urls = [u.strip() for u in (env.get("READ_REPLICA_URLS") or "").split(",") if u.strip()]
    if not urls:
        return None

    def make_views(url: str) -> SessionViews:
        params = conninfo_to_dict(url)
        return standby_views(PostgresDatastore(
            dbname=str(params.get("dbname") or "postgres"),
            host=str(params.get("host") or "127.0.0.1"), port=str(params.get("port") or 5432),
            user=str(params.get("user") or "postgres"), password=str(params.get("password") or ""),
            connect_timeout=POOL_WAIT_SECONDS, pool_size=1, max_overflow=pool_size - 1,
            idle_in_transaction_session_timeout=5,
        ))  # fmt: skip

    primary_conninfo = make_conninfo(
        dbname=env.get("POSTGRES_DBNAME") or "postgres", host=env.get("POSTGRES_HOST"),
        port=env.get("POSTGRES_PORT"), user=env.get("POSTGRES_USER"),
        password=env.get("POSTGRES_PASSWORD") or None,
    )  # fmt: skip
    return ReplicaSet(
        primary, primary_conninfo, urls, make_views,
        max_lag=float(env.get("REPLICA_MAX_LAG_SECONDS") or MAX_LAG_SECONDS),
        wait=float(env.get("REPLICA_WAIT_MS") or WAIT_MS) / 1000,
        interval=float(env.get("REPLICA_CHECK_SECONDS") or CHECK_SECONDS),
    )  # fmt: skip
