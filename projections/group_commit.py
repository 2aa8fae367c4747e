"""Group commit: writes that arrive while a commit is in flight share the next one.

A durable commit waits for an fsync; writers that queue behind it would each wait for
one more. Here every writer puts its write in a queue and takes the commit lock; the
first to hold it (the leader) runs every write queued by then in one transaction, each
inside a savepoint of its own, and commits once. A write that fails is rolled back to
its savepoint and fails alone, with its own error; the others commit. Each writer
returns (or raises) only after the commit that holds its write is durable, so a write
is acknowledged exactly as before, and only later than alone when it waited for others.

A write that finds no other queued or committing runs in its own transaction at once,
without the queue.

The recorder owns what a write does (`apply`) and how a transaction begins and ends
(`transaction`); this module only orders them. A batch never holds two writes of one
thread, and at most `max_writes` writes.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from contextlib import AbstractContextManager
from typing import Any, Generic, TypeVar

R = TypeVar("R")
MAX_WRITES = 256  # a batch's bound: one transaction's size and its writers' wait


class _Write(Generic[R]):
    __slots__ = ("apply", "done", "error", "result")

    def __init__(self, apply: Callable[[Any], R]) -> None:
        self.apply = apply
        self.done = False
        self.result: R | None = None
        self.error: BaseException | None = None


class GroupCommit:
    """Runs writes in shared transactions; see the module's docstring."""

    def __init__(
        self,
        transaction: Callable[[], AbstractContextManager[Any]],
        savepoint: Callable[[Any, str], None],
        library_error: Callable[[BaseException], BaseException],
        max_writes: int = MAX_WRITES,
        before_queueing: Callable[[], None] = lambda: None,
    ) -> None:
        """`transaction()`: one write transaction, yielding its cursor, committing on a
        clean exit. `savepoint(cursor, statement)` runs a SAVEPOINT statement.
        `library_error` turns a driver error caught inside a savepoint into the one the
        transaction would have raised (the ledger tells races and lost answers by it).
        `before_queueing()` is called by a write that finds others at work, before it
        queues behind them (it may raise: a write that may not wait)."""
        self._transaction = transaction
        self._savepoint = savepoint
        self._library_error = library_error
        self._before_queueing = before_queueing
        self.max_writes = max_writes
        self._queue: deque[_Write[Any]] = deque()
        self._queue_lock = threading.Lock()
        self._commit_lock = threading.Lock()
        self.commits = 0  # transactions committed or tried: writes / commits = batch size
        self.writes = 0

    @property
    def waiting(self) -> int:
        """Writes queued for the next commit (not those of the commit in flight)."""
        return len(self._queue)

    def run(self, apply: Callable[[Any], R]) -> R:
        """`apply(cursor)` inside the next commit; its result once that commit is durable."""
        # Alone (no writer queued, none committing): its own transaction, with no queue.
        # A writer that queues meanwhile waits for the commit lock, as behind any commit.
        if not self._queue and self._commit_lock.acquire(blocking=False):
            try:
                if not self._queue:
                    self.commits += 1
                    self.writes += 1
                    with self._transaction() as cursor:
                        return apply(cursor)
            finally:
                self._commit_lock.release()
        self._before_queueing()
        write: _Write[R] = _Write(apply)
        with self._queue_lock:
            self._queue.append(write)
        with self._commit_lock:
            while not write.done:  # FIFO: the batches ahead of it, then its own
                self._commit_next()
        if write.error is not None:
            raise write.error
        return write.result  # type: ignore[return-value]

    def _commit_next(self) -> None:
        with self._queue_lock:
            batch = [self._queue.popleft() for _ in range(min(len(self._queue), self.max_writes))]
        self.commits += 1
        self.writes += len(batch)
        try:
            if len(batch) == 1:  # alone: the transaction is its savepoint
                with self._transaction() as cursor:
                    batch[0].result = batch[0].apply(cursor)
            else:
                with self._transaction() as cursor:
                    for write in batch:
                        self._apply_in_savepoint(cursor, write)
        except BaseException as error:  # BEGIN or COMMIT failed: no write of it committed
            for write in batch:
                if write.error is None:
                    write.result, write.error = None, error
        finally:
            for write in batch:
                write.done = True

    def _apply_in_savepoint(self, cursor: Any, write: _Write[Any]) -> None:
        self._savepoint(cursor, "SAVEPOINT ledger_write")
        try:
            write.result = write.apply(cursor)
        except Exception as error:
            self._savepoint(cursor, "ROLLBACK TO SAVEPOINT ledger_write")
            self._savepoint(cursor, "RELEASE SAVEPOINT ledger_write")
            write.error = self._library_error(error)
        else:
            self._savepoint(cursor, "RELEASE SAVEPOINT ledger_write")
