"""Run the store's own (blocking-style) read code on the event loop, its waits on the
server done by asyncio: the pattern of SQLAlchemy's asyncio extension.

`await bridged(read)` runs `read` in a greenlet of its own on the loop's thread. Where the
code would block on a socket, the PostgreSQL store (projections/postgres.py) calls
`wait_for(awaitable)` instead: the greenlet switches back to `bridged`, which awaits the
psycopg coroutine as any coroutine of the loop, and switches back with its result. So a
read is one code path whether a thread or the loop runs it: no thread hand-off, and a
server that stops answering holds only the request that waits on it, never the loop.
A pause between retries (`pause`, `retried`) is awaited there too.
"""

from __future__ import annotations

import asyncio
import contextvars
import functools
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from eventsourcing.persistence import IntegrityError
from greenlet import getcurrent, greenlet  # type: ignore[import-untyped]

from session_ledger.domain.ports import OutcomeUnknown

R = TypeVar("R")
# The jitter of a retry's pause draws from its own generator: a library that drew from
# the module's would move the application's seeded `random` stream.
_JITTER = random.Random()


class _Bridged(greenlet):  # type: ignore[misc]
    """A greenlet running one call for `bridged`; its parent awaits for it."""


def in_bridge() -> bool:
    """Whether this code runs under `bridged`: its waits must go through `wait_for`."""
    return isinstance(getcurrent(), _Bridged)


def wait_for(awaitable: Awaitable[R]) -> R:
    """The result of `awaitable`, awaited by the event loop (only under `bridged`)."""
    current = getcurrent()
    if not isinstance(current, _Bridged):
        raise RuntimeError("wait_for is called only under bridged()")
    result: R = current.parent.switch(awaitable)
    return result


async def bridged(call: Callable[[], R]) -> R:
    """`call()` run on the loop's thread, each `wait_for` in it awaited here. An exception
    of an await (a cancellation too) is raised inside `call` where it waited, so its
    `finally` blocks and context managers run (a pooled connection goes back)."""
    child = _Bridged(call)
    child.gr_context = contextvars.copy_context()
    pending: Any = child.switch()
    while not child.dead:
        try:
            value = await pending
        except BaseException as exc:
            pending = child.throw(exc)
        else:
            pending = child.switch(value)
    result: R = pending
    return result


def off_loop(call: Callable[[], R]) -> R:
    """`call()` in a worker thread, awaited, under `bridged` (for blocking work of another
    store, such as a quota's count); elsewhere here."""
    if in_bridge():
        return wait_for(asyncio.to_thread(call))
    return call()


def pause(seconds: float) -> None:
    """Wait `seconds`: awaited by the loop under `bridged`, else sleeping this thread."""
    if in_bridge():
        wait_for(asyncio.sleep(seconds))
    else:
        time.sleep(seconds)


def retried(
    errors: tuple[type[Exception], ...], attempts: int, wait: float
) -> Callable[[Callable[..., R]], Callable[..., R]]:
    """A call tried up to `attempts` times while it raises one of `errors`, with a `pause`
    of `wait` seconds (within 5%) between tries: eventsourcing's `retry`, whose
    `time.sleep` would hold the loop under `bridged`. A write refused on a later try (an
    IntegrityError) is raised as `OutcomeUnknown`: the try before may have stored it
    and lost its answer."""

    def decorate(call: Callable[..., R]) -> Callable[..., R]:
        @functools.wraps(call)
        def tried(*args: Any, **kwargs: Any) -> R:
            tries = 1
            while True:
                try:
                    return call(*args, **kwargs)
                except IntegrityError as refused:
                    if tries == 1:
                        raise
                    raise OutcomeUnknown(f"refused on try {tries}: {refused}") from refused
                except errors:
                    if tries >= attempts:
                        raise
                    tries += 1
                    pause(wait * _JITTER.uniform(0.95, 1.05))

        return tried

    return decorate
