"""The bridge that runs blocking-style store code on the event loop (async_bridge.py):
what the code returns or raises comes out of `bridged`; its waits are the loop's, so
other tasks run meanwhile; a cancellation is raised where the code waited, and its
cleanup (which may wait too) runs before `bridged` ends."""

from __future__ import annotations

import asyncio
import contextvars
import threading

import pytest
from eventsourcing.persistence import IntegrityError

from session_ledger.domain.ports import OutcomeUnknown
from session_ledger.projections.async_bridge import (
    bridged,
    in_bridge,
    off_loop,
    pause,
    retried,
    wait_for,
)
from tests.conftest import ticking

request_id: contextvars.ContextVar[str] = contextvars.ContextVar("request_id", default="none")


def test_the_call_returns_what_its_awaits_gave() -> None:
    async def main() -> tuple[int, bool, bool]:
        def call() -> tuple[int, bool, bool]:
            first = wait_for(asyncio.sleep(0, result=20))
            second = wait_for(asyncio.sleep(0, result=22))
            return first + second, in_bridge(), threading.current_thread() is main_thread

        main_thread = threading.current_thread()
        return await bridged(call)

    total, bridged_there, same_thread = asyncio.run(main())
    assert (total, bridged_there, same_thread) == (42, True, True)
    assert not in_bridge()


def test_an_error_of_the_call_or_of_an_await_is_raised_by_bridged() -> None:
    async def failing() -> None:
        raise KeyError("from the await")

    def call_raises() -> None:
        raise ValueError("from the call")

    def await_raises() -> str:
        try:
            wait_for(failing())
        except KeyError as e:  # raised where the call waited: it may handle it
            return f"handled {e}"
        return "not raised"

    async def main() -> str:
        with pytest.raises(ValueError, match="from the call"):
            await bridged(call_raises)
        return await bridged(await_raises)

    assert asyncio.run(main()) == "handled 'from the await'"


def test_other_tasks_run_while_the_call_waits() -> None:
    ticks: list[int] = []

    async def ticker(released: asyncio.Event) -> None:
        while not released.is_set():
            ticks.append(1)
            await asyncio.sleep(0)

    async def main() -> int:
        released = asyncio.Event()
        task = asyncio.create_task(ticker(released))

        def call() -> int:
            # The loop must run the ticker for the call's wait to end.
            wait_for(asyncio.sleep(0))
            while len(ticks) < 5:
                wait_for(asyncio.sleep(0))
            released.set()
            return len(ticks)

        seen = await bridged(call)
        await task
        return seen

    assert asyncio.run(main()) >= 5


def test_a_cancelled_call_runs_its_cleanup_and_the_cancellation_goes_on() -> None:
    steps: list[str] = []

    def call() -> None:
        try:
            steps.append("waiting")
            wait_for(asyncio.sleep(60))
        finally:
            steps.append("cleaning up")
            wait_for(asyncio.sleep(0))  # cleanup may wait on the loop too
            steps.append("cleaned up")

    async def main() -> None:
        task = asyncio.create_task(bridged(call))
        while not steps:
            await asyncio.sleep(0)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    assert steps == ["waiting", "cleaning up", "cleaned up"]


def test_the_call_sees_the_context_of_its_task() -> None:
    async def main() -> str:
        request_id.set("req-7")
        return await bridged(request_id.get)

    assert asyncio.run(main()) == "req-7"


def test_wait_for_outside_bridged_is_an_error() -> None:
    coroutine = asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="only under bridged"):
        wait_for(coroutine)
    coroutine.close()


def test_a_retried_call_pauses_on_the_loop_between_tries_and_gives_up_with_the_error() -> None:
    tries: list[int] = []

    @retried((ConnectionError,), attempts=3, wait=0.05)
    def flaky(fails: int) -> str:
        tries.append(1)
        if len(tries) <= fails:
            raise ConnectionError(f"try {len(tries)}")
        return "stored"

    async def main() -> tuple[str, int]:
        async with ticking(0.005) as ticks:
            result = await bridged(lambda: flaky(2))  # two pauses of ~50 ms, awaited
        return result, len(ticks)

    result, ticks = asyncio.run(main())
    assert (result, len(tries)) == ("stored", 3)
    assert ticks >= 10  # a blocking sleep would have let it tick once
    tries.clear()
    with pytest.raises(ConnectionError, match="try 3"):  # out of a thread: time.sleep
        flaky(5)
    assert len(tries) == 3
    with pytest.raises(KeyError):  # not one of its errors: not tried again
        retried((ConnectionError,), attempts=3, wait=0)(lambda: {}["x"])()


def test_a_refusal_after_a_failed_try_is_outcome_unknown() -> None:
    # The try before may have stored the write and lost its answer: the refusal can be
    # that try's own row. A refusal on the first try stored nothing.
    tries: list[int] = []

    @retried((ConnectionError,), attempts=3, wait=0)
    def write(first: Exception) -> None:
        tries.append(1)
        raise first if len(tries) == 1 else IntegrityError("its own row")

    with pytest.raises(IntegrityError, match="another writer's row") as refused:
        write(IntegrityError("another writer's row"))
    assert type(refused.value) is IntegrityError and len(tries) == 1
    tries.clear()
    with pytest.raises(OutcomeUnknown, match="refused on try 2: its own row") as unknown:
        write(ConnectionError("the answer was lost"))
    assert isinstance(unknown.value.__cause__, IntegrityError)


def test_off_loop_runs_a_blocking_call_in_a_thread_only_under_bridged() -> None:
    def where() -> bool:
        return threading.current_thread() is threading.main_thread()

    async def main() -> bool:
        return await bridged(lambda: off_loop(where))

    assert asyncio.run(main()) is False  # under bridged: a worker thread
    assert off_loop(where) is True  # elsewhere: here
    pause(0)  # outside bridged it sleeps this thread, and needs no loop
