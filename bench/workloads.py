"""The timed workloads (W1, W1x4, W2, W3, W4, W5) and the time budget that skips a cell.

The stores of a repetition take turns at each workload (`take_turns`): W1 is ten
blocks of 200 calls per store, the stores alternating, so that every ratio pairs
figures measured seconds apart rather than minutes apart on a machine whose speed
drifts. A write cell that passes its budget stops early; its total is then predicted
from the per-call cost measured so far (a line fitted to it, because several peers
slow down as a history grows). A read cell whose predicted time exceeds the budget
is not run: its time is predicted from the two smaller histories.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

from .stores import Store

WRITERS = 4


@dataclass
class Cell:
    """One measurement: a rate (msg/s) or a time (ms), or the prediction that replaced it."""

    unit: str
    value: float | None = None
    predicted: float | None = None  # same unit as value, when the cell was skipped
    note: str = ""
    extra: dict[str, float] = field(default_factory=dict)

    def best(self) -> float | None:
        return self.value if self.value is not None else self.predicted

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


def _predict_total(latencies: list[float], total: int) -> float:
    """Seconds for `total` calls, from a least-squares line through the per-call cost."""
    n = len(latencies)
    mean_i = (n - 1) / 2
    mean_t = sum(latencies) / n
    var = sum((i - mean_i) ** 2 for i in range(n)) or 1.0
    slope = max(0.0, sum((i - mean_i) * (t - mean_t) for i, t in enumerate(latencies)) / var)
    intercept = mean_t - slope * mean_i
    return total * intercept + slope * total * (total - 1) / 2


class Run:
    """One store's share of a workload, run a turn at a time (`take_turns`)."""

    done = False
    error: Exception | None = None  # what a turn raised: the run stops there

    def turn(self, rounds: int) -> None:
        """Run this store's next part: about 1/`rounds` of the whole."""
        raise NotImplementedError

    def cell(self) -> Cell:
        raise NotImplementedError


def take_turns(runs: list[Run], rounds: int) -> None:
    """Run every store's workload in `rounds` turns each, the stores alternating (and
    starting with a different store each round), so that two stores compared with each
    other are measured seconds apart rather than minutes: the speed of this machine's
    CPU and fsync drifts several-fold within minutes."""
    for r in range(rounds + 1):  # the last round: what the others left (normally nothing)
        k = r % len(runs) if runs else 0
        for run in runs[k:] + runs[:k]:
            while not run.done and run.error is None:
                try:
                    run.turn(rounds if r < rounds else 1)
                except Exception as exc:  # recorded with the store's cell
                    run.error = exc
                if r < rounds:
                    break


class SequenceRun(Run):
    """W1 and W2: one append per call, in order; msg/s, and how the per-call cost grew.
    Past its budget (the time spent in its own turns) it stops, and its total is
    predicted from the per-call cost so far."""

    def __init__(self, store: Store, calls: list[tuple[str, Any]], budget_s: float) -> None:
        self.store = store
        self.calls = calls
        self.budget_s = budget_s
        self.latencies: list[float] = []
        self.elapsed = 0.0
        self.stopped = False

    @property
    def done(self) -> bool:  # type: ignore[override]
        return self.stopped or len(self.latencies) == len(self.calls)

    def turn(self, rounds: int) -> None:
        at = len(self.latencies)
        block = self.calls[at : at + math.ceil(len(self.calls) / rounds)]
        start = time.perf_counter()
        for session, message in block:
            t0 = time.perf_counter()
            self.store.append(session, message)
            t1 = time.perf_counter()
            self.latencies.append(t1 - t0)
            if self.elapsed + (t1 - start) > self.budget_s and not self.done:
                self.stopped = True
                break
        self.elapsed += time.perf_counter() - start

    def cell(self) -> Cell:
        made, total = len(self.latencies), len(self.calls)
        if self.stopped:
            seconds = _predict_total(self.latencies, total)
            return Cell(
                "msg/s",
                predicted=total / seconds,
                note=f"stopped at {made}/{total} after {self.elapsed:.0f} s; "
                f"predicted {seconds:.0f} s",
            )
        tenth = max(1, made // 10)
        growth = statistics.median(self.latencies[-tenth:]) / statistics.median(
            self.latencies[:tenth]
        )
        return Cell("msg/s", value=total / self.elapsed, extra={"cost_growth": growth})


class ParallelRun(Run):
    """W1x4: each thread appends its own session through its own writer handle; every
    turn starts the threads together and ends when the last one finishes its part."""

    def __init__(
        self, store: Store, per_writer: list[list[tuple[str, Any]]], budget_s: float
    ) -> None:
        self.store = store
        self.per_writer = per_writer
        self.budget_s = budget_s
        self.made = [0] * len(per_writer)
        self.elapsed = 0.0
        self.stopped = False

    @property
    def done(self) -> bool:  # type: ignore[override]
        return self.stopped or self.made == [len(calls) for calls in self.per_writer]

    def turn(self, rounds: int) -> None:
        writers = [self.store.writer() for _ in self.per_writer]
        errors: list[BaseException] = []
        barrier = threading.Barrier(len(self.per_writer) + 1)
        deadline = [math.inf]

        def work(index: int) -> None:
            calls = self.per_writer[index]
            at = self.made[index]
            barrier.wait()
            try:
                for session, message in calls[at : at + math.ceil(len(calls) / rounds)]:
                    writers[index].append(session, message)
                    self.made[index] += 1
                    if time.perf_counter() > deadline[0]:
                        self.stopped = True
                        return
            except BaseException as exc:  # reported by the main thread
                errors.append(exc)

        threads = [threading.Thread(target=work, args=(i,)) for i in range(len(writers))]
        for thread in threads:
            thread.start()
        start = time.perf_counter()
        deadline[0] = start + self.budget_s - self.elapsed
        barrier.wait()
        for thread in threads:
            thread.join()
        self.elapsed += time.perf_counter() - start
        for writer in writers:
            self.store.release_writer(writer)
        if errors:
            raise errors[0]

    def cell(self) -> Cell:
        total, count = sum(len(calls) for calls in self.per_writer), sum(self.made)
        if count < total:
            return Cell(
                "msg/s",
                predicted=count / self.elapsed,
                note=f"stopped at {count}/{total} after {self.elapsed:.0f} s",
            )
        return Cell("msg/s", value=total / self.elapsed)


MAX_READS = 500  # calls of one read cell


class ReadRun(Run):
    """W3, W4 and W5: the median ms of repeated calls, `spend_s` of them in all (at least
    5 calls, at most MAX_READS), spread evenly over the turns; one call only when a call is slow
    (more than a fifth of `spend_s`)."""

    def __init__(
        self, read: Any, budget_s: float, spend_s: float, expect: int | None = None
    ) -> None:
        self.read = read
        self.spend_s = min(spend_s, budget_s)
        self.expect = expect
        self.times: list[float] = []
        self.spent = 0.0  # wall time of the timed calls' turns
        self.first: float | None = None
        self.count: int | None = None
        self.single = False

    @property
    def done(self) -> bool:  # type: ignore[override]
        return (
            self.single
            or len(self.times) >= MAX_READS
            or (len(self.times) >= 5 and self.spent >= self.spend_s * 0.999)
        )

    def turn(self, rounds: int) -> None:
        if self.first is None:
            t0 = time.perf_counter()
            self.count = self.read()
            self.first = time.perf_counter() - t0
            if self.expect is not None and self.count != self.expect:
                raise AssertionError(f"read returned {self.count} messages, expected {self.expect}")
            if self.first > self.spend_s / 5:
                self.single = True  # too slow to repeat: the first call is the measurement
                return
        calls = max(1, math.ceil(5 / rounds))
        most = math.ceil(MAX_READS / rounds)  # a fast read spreads its calls over the turns
        start = time.perf_counter()
        deadline = start + self.spend_s / rounds
        made = 0
        while made < calls or (
            time.perf_counter() < deadline and made < most and len(self.times) < MAX_READS
        ):
            t0 = time.perf_counter()
            self.read()
            self.times.append(time.perf_counter() - t0)
            made += 1
        self.spent += time.perf_counter() - start

    def cell(self) -> Cell:
        assert self.first is not None
        extra = {"returned": float(self.count or 0), "first_ms": self.first * 1000}
        if self.single:
            return Cell("ms", value=self.first * 1000, extra={"calls": 1, **extra})
        return Cell(
            "ms",
            value=statistics.median(self.times) * 1000,
            extra={"calls": len(self.times), **extra},
        )


def predict_read(sizes_ms: list[tuple[int, float]], size: int) -> float | None:
    """ms at `size`, by a power law through the two largest smaller sizes measured."""
    known = sorted(s for s in sizes_ms if s[0] < size)
    if not known:
        return None
    if len(known) == 1:
        (n1, t1) = known[0]
        return t1 * size / n1  # assume at least linear growth
    (n1, t1), (n2, t2) = known[-2], known[-1]
    exponent = math.log(max(t2, 1e-9) / max(t1, 1e-9)) / math.log(n2 / n1)
    # No store here is worse than quadratic (ChatMemoryBuffer re-tokenizes at most n
    # messages at each of at most n trim steps); noise must not predict more.
    exponent = min(2.0, max(0.0, exponent))
    return t2 * (size / n2) ** exponent
