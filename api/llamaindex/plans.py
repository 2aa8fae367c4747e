"""What each adapter method does, written once for sync and async callers.

A plan is a generator that yields backend calls, `(name, args)`, and gets each answer
sent back; `run` drives it with blocking calls and `arun` with awaited ones. A plan that
reads and then writes names the version it read (`expected_version`), so a concurrent
writer makes the driver start it again instead of returning a stale answer.

Presence: a session counts as present unless it never existed or its latest event
cleared it (`delete_messages` / `reset`), as a key exists in `SimpleChatStore`: a list
emptied by `set_messages(key, [])` or by deleting every message one by one stays a key.
"""

from __future__ import annotations

from collections.abc import Callable, Generator
from typing import Any, TypeVar

from session_ledger.domain.errors import InvalidInput, LedgerError, VersionConflict

from .memory_backends import MemoryHead

T = TypeVar("T")
Call = tuple[str, tuple[Any, ...]]
Plan = Generator[Call, Any, T]
RETRIES = 50
ACTIVE, ARCHIVED = "active", "archived"


def run(backend: Any, plan: Callable[..., Plan[T]], *args: Any, **kwargs: Any) -> T:
    """Drive `plan(*args, **kwargs)` with the backend's blocking calls."""
    for _ in range(RETRIES):
        steps = plan(*args, **kwargs)
        try:
            call = next(steps)
            while True:
                try:
                    answer = getattr(backend, call[0])(*call[1])
                except LedgerError as e:
                    call = steps.throw(e)
                else:
                    call = steps.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except VersionConflict:
            continue
    raise LedgerError(f"{plan.__name__} lost the race with other writers {RETRIES} times")


async def arun(backend: Any, plan: Callable[..., Plan[T]], *args: Any, **kwargs: Any) -> T:
    """Drive `plan(*args, **kwargs)` with the backend's async calls."""
    for _ in range(RETRIES):
        steps = plan(*args, **kwargs)
        try:
            call = next(steps)
            while True:
                try:
                    answer = await getattr(backend, "a" + call[0])(*call[1])
                except LedgerError as e:
                    call = steps.throw(e)
                else:
                    call = steps.send(answer)
        except StopIteration as done:
            return done.value  # type: ignore[no-any-return]
        except VersionConflict:
            continue
    raise LedgerError(f"{plan.__name__} lost the race with other writers {RETRIES} times")


def present(key: str) -> Plan[MemoryHead | None]:
    head: MemoryHead | None = yield "head", (key,)
    return head if head is not None and not head.cleared else None


def get_all(
    key: str, status: str = ACTIVE, offset: int = 0, limit: int | None = None
) -> Plan[list]:
    return (yield "get_all", (key, status, offset, limit))  # type: ignore[no-any-return]


def get(key: str, token_limit: int | None, initial_token_count: int) -> Plan[list]:
    return (yield "get", (key, token_limit, initial_token_count))  # type: ignore[no-any-return]


def put_messages(key: str, messages: list[dict]) -> Plan[None]:
    if messages:  # LlamaIndex stores accept an empty batch; the ledger refuses one
        yield "put_messages", (key, messages)


def set_messages(key: str, messages: list[dict]) -> Plan[None]:
    yield "set", (key, messages, None)


def insert_message(key: str, message: dict, index: int) -> Plan[None]:
    """`list.insert(index, message)` on the history, as one replace."""
    head: MemoryHead | None = yield "head", (key,)
    history = (yield from get_all(key)) if head else []
    history.insert(index, message)
    yield "set", (key, history, head.version if head else 0)


def clear(key: str) -> Plan[list | None]:
    """Reset; the active messages it removed, None when the key was absent."""
    head = yield from present(key)
    if head is None:
        return None
    history = yield from get_all(key)
    yield "reset", (key, head.version)
    return history


def clear_active(key: str) -> Plan[None]:
    head = yield from present(key)
    if head is not None and head.message_count:
        yield "set", (key, [], head.version)


def delete_at(key: str, index: int, *, python_bounds: bool) -> Plan[dict | None]:
    """Remove the message at `index`. None when the key is absent or `index` is past
    the end; before the start it raises IndexError (`list.pop`) when `python_bounds`,
    else None (the SQL stores, which look a message up)."""
    head = yield from present(key)
    if head is None or index >= head.message_count:
        return None
    if index < -head.message_count and not python_bounds:
        return None
    return (yield "delete_message", (key, index, head.version))  # type: ignore[no-any-return]


def delete_last(key: str) -> Plan[dict | None]:
    head = yield from present(key)
    if head is None:
        return None
    return (yield "delete_message", (key, -1, head.version))  # type: ignore[no-any-return]


def take_oldest(key: str, n: int, *, archive: bool) -> Plan[list]:
    """Archive (or delete) the `n` oldest active messages; returns them."""
    head = yield from present(key)
    if head is None or n < 1 or not head.message_count:
        return []
    if archive:
        oldest = yield from get_all(key, ACTIVE, 0, n)
        yield "archive_oldest", (key, n, head.version)
        return oldest
    history = yield from get_all(key)
    yield "set", (key, history[n:], head.version)
    return history[:n]


def history_page(key: str, status: str | None, offset: int, limit: int | None) -> Plan[list]:
    """A page of the history; `status=None`: the archive, then the active messages."""
    if status is not None:
        return (yield from get_all(key, status, offset, limit))
    head = yield from present(key)
    if head is None:
        return []
    page: list[dict] = []
    if offset < head.archived_count:
        archived = head.archived_count - offset
        take = archived if limit is None else min(limit, archived)
        page += yield from get_all(key, ARCHIVED, offset, take)
    remaining = None if limit is None else limit - len(page)
    if remaining is None or remaining > 0:
        page += yield from get_all(key, ACTIVE, max(0, offset - head.archived_count), remaining)
    return page


def count(key: str, status: str | None) -> Plan[int]:
    head: MemoryHead | None = yield "head", (key,)
    if head is None:
        return 0
    return {ACTIVE: head.message_count, ARCHIVED: head.archived_count}.get(
        status or "", head.message_count + head.archived_count
    )


def present_keys() -> Plan[list[str]]:
    """Every key whose session was not cleared, in the order the sessions were made (as
    SimpleChatStore lists them): a page of keys per request, the store leaving the
    cleared ones out."""
    found: list[str] = []
    after: str | None = None
    while True:
        page, after = yield "keys", (after,)
        found.extend(page)
        if after is None:
            return found


def active_only(status: object, what: str) -> None:
    if str(getattr(status, "value", status)) != ACTIVE:
        raise InvalidInput(
            f"{what} with status {status!r} is not supported: the ledger archives only by "
            "moving the oldest active messages (archive_oldest_messages)"
        )
