"""The health of read replicas: how far each PostgreSQL standby trails the primary, and
whether it serves reads.

Lag is measured in time, from the WAL alone: every check samples the primary's WAL
position; a standby that has not replayed a position the primary had at time t trails by
at least now - t. (`now() - pg_last_xact_replay_timestamp()` would call an idle primary's
standby an hour late.) The newest sample a standby has replayed also says which of this
process's writes it holds: every write committed before that sample was taken.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import psycopg

log = logging.getLogger("session_ledger.replicas")

# The WAL position a server has: written and flushed on a primary, replayed on a standby.
WAL_POSITION = (
    "SELECT pg_is_in_recovery(), pg_wal_lsn_diff(CASE WHEN pg_is_in_recovery() "
    "THEN pg_last_wal_replay_lsn() ELSE pg_current_wal_flush_lsn() END, '0/0')::bigint"
)
PROBE_TIMEOUT_SECONDS = 2  # a server that answers no check within this is unreachable
NOT_CHECKED = "not checked yet"


class WalSamples:
    """The primary's WAL position sampled over time (monotonic seconds), as far back as a
    lag worth measuring."""

    def __init__(self, keep_seconds: float) -> None:
        self.keep_seconds = keep_seconds
        self._samples: deque[tuple[float, int]] = deque()

    def add(self, at: float, position: int) -> None:
        self._samples.append((at, position))
        while self._samples and self._samples[0][0] < at - self.keep_seconds:
            self._samples.popleft()

    def lag(self, replayed: int, now: float) -> float:
        """Seconds a standby at `replayed` trails: since the oldest sample past it."""
        for at, position in self._samples:
            if position > replayed:
                return max(0.0, now - at)
        return 0.0

    def covered(self, replayed: int) -> float | None:
        """When the newest sample a standby at `replayed` holds was taken (None: none)."""
        for at, position in reversed(self._samples):
            if position <= replayed:
                return at
        return None


@dataclass
class Standby:
    """One read replica: its views (reads on a pool of its own) and its state."""

    name: str  # its URL without the password, for logs and status
    url: str
    views: Any  # a recorder on the standby's pool: the views' reads, served there
    serving: bool = False
    problem: str | None = NOT_CHECKED
    lag_seconds: float | None = None
    # Monotonic time: every write of this process committed before it is replayed there.
    covered_until: float = -math.inf
    broken: bool = False  # its pool met an error: renewed when it answers again


class Probe:
    """A connection of its own to one server, for checks only (never a pooled one: a
    standby busy serving reads is not a standby that is down)."""

    def __init__(self, conninfo: str) -> None:
        self.conninfo = conninfo
        self._conn: psycopg.Connection[Any] | None = None

    def position(self) -> tuple[bool, int]:
        """(in recovery, WAL position); psycopg.Error when the server cannot answer."""
        try:
            if self._conn is None or self._conn.closed:
                self._conn = psycopg.connect(
                    self.conninfo, autocommit=True, connect_timeout=PROBE_TIMEOUT_SECONDS,
                    options=f"-c statement_timeout={PROBE_TIMEOUT_SECONDS * 1000}",
                )  # fmt: skip
            row = self._conn.execute(WAL_POSITION).fetchone()
            assert row is not None
            return bool(row[0]), int(row[1] or 0)
        except psycopg.Error:
            self.close()
            raise

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class ReplicaMonitor:
    """Checks every standby every `interval` seconds in a thread of its own: a standby
    that cannot be reached, is no standby, or trails by more than `max_lag` seconds
    leaves the rotation; it comes back by itself once a check finds it well."""

    def __init__(
        self, primary: str, standbys: Sequence[Standby], *, max_lag: float, interval: float,
        renew: Callable[[Standby], None],
    ) -> None:  # fmt: skip
        self.standbys = standbys
        self.max_lag = max_lag
        self.interval = interval
        self.samples = WalSamples(max_lag + 3 * interval)
        self._renew = renew
        self._primary = Probe(primary)
        self._probes = {id(s): Probe(s.url) for s in standbys}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ledger-replicas", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def close(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()
        for probe in (self._primary, *self._probes.values()):
            probe.close()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                self.check()
            except Exception:  # a check must never end the monitor
                log.exception("read replica check failed")
            self._stop.wait(self.interval)

    def check(self) -> None:
        """One round: sample the primary, then judge every standby against the samples."""
        sampled = time.monotonic()  # before the read: writes committed earlier are in it
        try:
            _, position = self._primary.position()
        except psycopg.Error as e:  # no sample, no judgement: states stay as they are
            log.warning("read replicas: the primary's WAL position is unknown: %s", e)
            return
        self.samples.add(sampled, position)
        for standby in self.standbys:
            self._judge(standby)

    def _judge(self, standby: Standby) -> None:
        try:
            in_recovery, replayed = self._probes[id(standby)].position()
        except psycopg.Error as e:
            take_out(standby, f"unreachable: {str(e).strip()}", broken=True)
            return
        if not in_recovery:
            take_out(standby, "not a standby (promoted?): its data may differ from the primary's")
            return
        lag = self.samples.lag(replayed, time.monotonic())
        covered = self.samples.covered(replayed)
        standby.lag_seconds = lag
        if covered is not None:
            standby.covered_until = max(standby.covered_until, covered)
        if lag > self.max_lag:
            take_out(standby, f"trails the primary by {lag:.1f} s (limit {self.max_lag:g} s)")
            return
        if standby.broken:
            self._renew(standby)
            standby.broken = False
        if not standby.serving:  # a warning when it comes back from a problem
            level = logging.INFO if standby.problem == NOT_CHECKED else logging.WARNING
            log.log(level, "read replica %s serves reads (lag %.1f s)", standby.name, lag)
        standby.problem = None
        standby.serving = True


def take_out(standby: Standby, problem: str, *, broken: bool = False) -> None:
    """Take `standby` out of the rotation (logged once per change of problem)."""
    if standby.serving or standby.problem != problem:
        log.warning("read replica %s out of rotation: %s", standby.name, problem)
    standby.serving = False
    standby.problem = problem
    standby.broken = standby.broken or broken
