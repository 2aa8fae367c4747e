"""The benchmark's stores take turns at each workload (bench/workloads.py): every store
does all of its calls, in order, a block per round, the stores alternating; a store
that fails or runs out of budget stops without stopping the others."""

from __future__ import annotations

from typing import Any

import pytest

from bench.corpus import Message
from bench.stores import Context, Store
from bench.workloads import MAX_READS, ParallelRun, ReadRun, SequenceRun, take_turns


class Recording(Store):
    """Appends to a shared log; raises on the call numbered `fail_at`."""

    def __init__(self, name: str, log: list[tuple[str, str, Any]], fail_at: int = -1) -> None:
        self.name = name
        self.log = log
        self.fail_at = fail_at
        self.calls = 0

    def open(self, ctx: Context) -> None:
        return None

    def native(self, message: Message) -> Any:
        return message

    def append(self, session: str, message: Any) -> None:
        if self.calls == self.fail_at:
            raise RuntimeError(f"{self.name} failed")
        self.calls += 1
        self.log.append((self.name, session, message))

    def window(self, session: str) -> int:
        return 0

    def history(self, session: str) -> int:
        return 0


def calls(n: int) -> list[tuple[str, Any]]:
    return [("s", i) for i in range(n)]


def test_stores_alternate_a_block_at_a_time_and_each_makes_every_call_in_order() -> None:
    log: list[tuple[str, str, Any]] = []
    a, b = Recording("a", log), Recording("b", log)
    runs = [SequenceRun(a, calls(10), budget_s=60), SequenceRun(b, calls(10), budget_s=60)]
    take_turns(list(runs), rounds=5)
    # Blocks of 2; the store that goes first changes every round.
    blocks = [log[i][0] for i in range(0, len(log), 2)]
    assert blocks == ["a", "b", "b", "a", "a", "b", "b", "a", "a", "b"]
    for name in ("a", "b"):
        assert [m for who, _, m in log if who == name] == list(range(10))
    for run in runs:
        cell = run.cell()
        assert cell.value is not None and cell.value > 0 and "cost_growth" in cell.extra


def test_a_store_that_fails_stops_alone() -> None:
    log: list[tuple[str, str, Any]] = []
    bad, good = Recording("bad", log, fail_at=3), Recording("good", log)
    runs = [SequenceRun(bad, calls(10), budget_s=60), SequenceRun(good, calls(10), budget_s=60)]
    take_turns(list(runs), rounds=5)
    assert isinstance(runs[0].error, RuntimeError) and bad.calls == 3
    assert runs[1].error is None and good.calls == 10


def test_a_store_past_its_budget_stops_and_its_rate_is_predicted() -> None:
    log: list[tuple[str, str, Any]] = []
    run = SequenceRun(Recording("slow", log), calls(10), budget_s=0.0)
    take_turns([run], rounds=5)
    assert len(log) == 1  # the first call already passed the budget
    cell = run.cell()
    assert cell.value is None and cell.predicted is not None
    assert "stopped at 1/10" in cell.note


def test_parallel_writers_each_do_their_share_per_turn() -> None:
    log: list[tuple[str, str, Any]] = []
    store = Recording("x", log)
    per_writer = [[(f"s{t}", i) for i in range(6)] for t in range(4)]
    run = ParallelRun(store, per_writer, budget_s=60)
    take_turns([run], rounds=3)
    assert run.error is None and run.made == [6, 6, 6, 6]
    for t in range(4):
        assert [m for _, session, m in log if session == f"s{t}"] == list(range(6))
    assert run.cell().value is not None


def test_reads_are_repeated_over_the_turns_and_checked() -> None:
    reads: list[int] = []

    def read() -> int:
        reads.append(1)
        return 7

    run = ReadRun(read, budget_s=30, spend_s=0.01, expect=7)
    take_turns([run], rounds=5)
    cell = run.cell()
    assert run.error is None and cell.value is not None
    assert cell.extra["calls"] >= 5 and len(reads) == cell.extra["calls"] + 1  # + the first

    wrong = ReadRun(read, budget_s=30, spend_s=0.01, expect=8)
    take_turns([wrong], rounds=5)
    with pytest.raises(AssertionError, match="returned 7 messages, expected 8"):
        raise wrong.error  # type: ignore[misc]


def test_fast_reads_spread_their_calls_over_every_turn() -> None:
    log: list[str] = []
    runs = [
        ReadRun(lambda name=name: log.append(name) or 1, budget_s=30, spend_s=60)
        for name in ("a", "b")
    ]
    take_turns(list(runs), rounds=5)
    assert [len(run.times) for run in runs] == [MAX_READS, MAX_READS]
    # Five turns of MAX_READS / 5 calls each (the first turn with the first call too),
    # the stores alternating and the first of each round changing: a b | b a | a b | b a |
    # a b, so that runs of one store's calls, back to back, are these six.
    runs_of_calls = [name for i, name in enumerate(log) if i == 0 or log[i - 1] != name]
    assert runs_of_calls == ["a", "b", "a", "b", "a", "b"]
    assert log.count("a") == log.count("b") == MAX_READS + 1
