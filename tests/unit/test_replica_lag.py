"""A standby's lag, measured from samples of the primary's WAL position: the time since
the oldest sample it has not replayed (projections/replica_health.py)."""

from __future__ import annotations

from session_ledger.projections.replica_health import WalSamples


def samples(*points: tuple[float, int]) -> WalSamples:
    found = WalSamples(keep_seconds=100)
    for at, position in points:
        found.add(at, position)
    return found


def test_a_standby_that_replayed_every_sample_does_not_lag() -> None:
    wal = samples((0, 10), (1, 20), (2, 30))
    assert wal.lag(30, now=2.5) == 0
    assert wal.covered(30) == 2


def test_lag_is_the_time_since_the_oldest_sample_not_replayed() -> None:
    wal = samples((0, 10), (1, 20), (2, 30), (3, 40))
    assert wal.lag(20, now=3.5) == 1.5  # the primary had 30 at time 2
    assert wal.covered(20) == 1  # every write committed before time 1 is there
    assert wal.lag(5, now=3.5) == 3.5
    assert wal.covered(5) is None


def test_an_idle_primary_does_not_make_its_standby_look_late() -> None:
    wal = samples(*((t, 10) for t in range(0, 60)))  # no write for a minute
    assert wal.lag(10, now=60) == 0


def test_samples_older_than_the_window_are_dropped() -> None:
    wal = WalSamples(keep_seconds=5)
    for t in range(20):
        wal.add(t, t)
    assert wal.lag(0, now=19) == 5  # the oldest kept sample: t=14
    assert wal.covered(13) is None
