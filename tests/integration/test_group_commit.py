"""Group commit on SQLite: writers queued behind a commit share the next one, each gets
its own answer, and a write that fails in a shared commit fails alone."""

from __future__ import annotations

import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import pytest
from eventsourcing.persistence import IntegrityError

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import VersionConflict
from session_ledger.domain.ledger import Ledger, WriteResult
from session_ledger.projections.group_commit import GroupCommit
from session_ledger.projections.sqlite import SQLiteLedgerRecorder

WRITERS = 8


def _wait_until(condition: Callable[[], bool], seconds: float = 20) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "not within the wait"
        time.sleep(0.005)


@contextmanager
def _write_lock_held(path: Path) -> Iterator[None]:
    """Another connection holds SQLite's write lock: the first commit waits behind it."""
    with closing(sqlite3.connect(path, isolation_level=None)) as other:
        other.execute("BEGIN IMMEDIATE")
        try:
            yield
        finally:
            other.execute("ROLLBACK")


@pytest.fixture
def sqlite_ledger(tmp_path: Path) -> Iterator[Ledger]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}")
    migrate(settings)
    ledger = open_ledger(settings)
    yield ledger
    ledger.close()


def test_queued_writes_share_one_commit_and_each_gets_its_own_answer(
    sqlite_ledger: Ledger, tmp_path: Path
) -> None:
    ledger = sqlite_ledger
    recorder = ledger.recorder
    assert isinstance(recorder, SQLiteLedgerRecorder)
    group = recorder.group_commit
    for n in range(WRITERS):  # session n holds n + 1 messages, so every answer differs
        ledger.put_messages(f"s{n}", [{"role": "user", "content": f"m{i}"} for i in range(n + 1)])
    ledger.put("contested", {"role": "user", "content": "first"})
    commits, writes = group.commits, group.writes

    def put(key: str, **kw: Any) -> WriteResult:
        return ledger.put(key, {"role": "assistant", "content": f"to {key}"}, **kw)

    with ThreadPoolExecutor(WRITERS + 2) as pool, _write_lock_held(tmp_path / "ledger.db"):
        futures: dict[str, Future[WriteResult]] = {}
        futures["s0"] = pool.submit(put, "s0")  # the leader: waits for the lock
        _wait_until(lambda: group.commits == commits + 1)
        for n in range(1, WRITERS):
            futures[f"s{n}"] = pool.submit(put, f"s{n}")
        # Two writes that both expect version 2 of one session: one of them must fail.
        contested = [pool.submit(put, "contested", expected_version=2) for _ in range(2)]
        _wait_until(lambda: group.waiting == WRITERS - 1 + 2)
    results = {key: f.result(timeout=60) for key, f in futures.items()}
    outcomes = [f.exception(timeout=60) for f in contested]

    # The leader's write alone, then every write queued behind it in one commit (the
    # contested loser's retry, if it got one, in a third).
    assert group.writes - writes >= WRITERS + 2
    assert group.commits - commits <= 3
    for n in range(WRITERS):
        assert (results[f"s{n}"].version, results[f"s{n}"].message_count) == (3, n + 2)
        assert ledger.get_all(f"s{n}")[-1].content == f"to s{n}"
    # One contested write won, the other failed alone with its own precondition error.
    assert sum(o is None for o in outcomes) == 1
    (lost,) = [o for o in outcomes if o is not None]
    assert isinstance(lost, VersionConflict)
    assert [m.content for m in ledger.get_all("contested")] == ["first", "to contested"]
    assert all(report.intact for report in ledger.verify_all())  # every hash chain


def test_a_failing_write_in_a_batch_is_rolled_back_alone(tmp_path: Path) -> None:
    path = tmp_path / "rows.db"
    with closing(sqlite3.connect(path, isolation_level=None)) as setup:
        setup.execute("PRAGMA journal_mode=WAL")
        setup.execute("CREATE TABLE rows (id INTEGER PRIMARY KEY, writer TEXT)")
        setup.execute("INSERT INTO rows VALUES (100, 'before')")
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)

    @contextmanager
    def transaction() -> Iterator[sqlite3.Cursor]:
        cursor = conn.cursor()
        cursor.execute("BEGIN")
        try:
            yield cursor
        except BaseException:
            conn.rollback()
            raise
        conn.commit()

    def library_error(error: BaseException) -> BaseException:
        return IntegrityError(error) if isinstance(error, sqlite3.IntegrityError) else error

    group = GroupCommit(transaction, lambda c, s: c.execute(s), library_error)
    release = threading.Event()

    def insert(ids: list[int], writer: str, wait: bool = False) -> Callable[[Any], str]:
        def apply(cursor: sqlite3.Cursor) -> str:
            if wait:
                release.wait(20)
            for i in ids:
                cursor.execute("INSERT INTO rows VALUES (?, ?)", (i, writer))
            return f"{writer} wrote {ids}"

        return apply

    with ThreadPoolExecutor(4) as pool:
        first = pool.submit(group.run, insert([1], "leader", wait=True))
        _wait_until(lambda: group.commits == 1)
        good = pool.submit(group.run, insert([2, 3], "good"))
        bad = pool.submit(group.run, insert([4, 100], "bad"))  # 4 first, then a taken id
        other = pool.submit(group.run, insert([5], "other"))
        _wait_until(lambda: group.waiting == 3)
        release.set()
        answers = [f.result(timeout=30) for f in (first, good, other)]
        failed = bad.exception(timeout=30)
    conn.close()

    assert answers == ["leader wrote [1]", "good wrote [2, 3]", "other wrote [5]"]
    assert isinstance(failed, IntegrityError)
    assert (group.commits, group.writes) == (2, 4)
    with closing(sqlite3.connect(path)) as check:
        rows = check.execute("SELECT id, writer FROM rows ORDER BY id").fetchall()
    assert rows == [(1, "leader"), (2, "good"), (3, "good"), (5, "other"), (100, "before")]
