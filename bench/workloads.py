"""The timed workloads (W1, W1x4, W2, W3, W4) and the time budget that skips a cell.

A write cell that passes its budget stops early; its total is then predicted
from the per-call cost measured so far (a line fitted to it, because several
peers slow down as a history grows). A read cell whose predicted time exceeds
the budget is not run: its time is predicted from the two smaller histories.
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


def append_sequence(store: Store, calls: list[tuple[str, Any]], budget_s: float) -> Cell:
    """W1 and W2: one append per call, in order; msg/s, and how the per-call cost grew."""
    latencies: list[float] = []
    start = time.perf_counter()
    deadline = start + budget_s
    for session, message in calls:
        t0 = time.perf_counter()
        store.append(session, message)
        t1 = time.perf_counter()
        latencies.append(t1 - t0)
        if t1 > deadline and len(latencies) < len(calls):
            seconds = _predict_total(latencies, len(calls))
            return Cell(
                "msg/s",
                predicted=len(calls) / seconds,
                note=f"stopped at {len(latencies)}/{len(calls)} after {t1 - start:.0f} s; "
                f"predicted {seconds:.0f} s",
            )
    elapsed = time.perf_counter() - start
    tenth = max(1, len(latencies) // 10)
    growth = statistics.median(latencies[-tenth:]) / statistics.median(latencies[:tenth])
    return Cell("msg/s", value=len(calls) / elapsed, extra={"cost_growth": growth})


def append_parallel(store: Store, per_writer: list[list[tuple[str, Any]]], budget_s: float) -> Cell:
    """W1x4: each thread appends its own session through its own writer handle."""
    writers = [store.writer() for _ in per_writer]
    done = [0] * len(per_writer)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(per_writer) + 1)
    deadline = [math.inf]

    def work(index: int) -> None:
        barrier.wait()
        try:
            for session, message in per_writer[index]:
                writers[index].append(session, message)
                done[index] += 1
                if time.perf_counter() > deadline[0]:
                    return
        except BaseException as exc:  # reported by the main thread
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(per_writer))]
    for thread in threads:
        thread.start()
    start = time.perf_counter()
    deadline[0] = start + budget_s
    barrier.wait()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - start
    for writer in writers:
        store.release_writer(writer)
    if errors:
        raise errors[0]
    total, count = sum(len(calls) for calls in per_writer), sum(done)
    if count < total:
        return Cell(
            "msg/s",
            predicted=count / elapsed,
            note=f"stopped at {count}/{total} after {elapsed:.0f} s",
        )
    return Cell("msg/s", value=total / elapsed)


def timed_read(read: Any, budget_s: float, spend_s: float, expect: int | None = None) -> Cell:
    """W3 and W4: median ms of repeated calls; one call only when a call is slow."""
    t0 = time.perf_counter()
    count = read()
    first = time.perf_counter() - t0
    if expect is not None and count != expect:
        raise AssertionError(f"read returned {count} messages, expected {expect}")
    if first > spend_s / 5:
        # Too slow to repeat within the budget: the first call is the measurement.
        return Cell(
            "ms",
            value=first * 1000,
            extra={"calls": 1, "returned": count, "first_ms": first * 1000},
        )
    times: list[float] = []
    deadline = time.perf_counter() + min(spend_s, budget_s)
    while len(times) < 5 or (time.perf_counter() < deadline and len(times) < 500):
        t0 = time.perf_counter()
        read()
        times.append(time.perf_counter() - t0)
    return Cell(
        "ms",
        value=statistics.median(times) * 1000,
        extra={"calls": len(times), "returned": count, "first_ms": first * 1000},
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
