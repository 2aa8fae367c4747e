"""Writers racing on one session: every acknowledged message stored exactly once."""

from __future__ import annotations

import multiprocessing
import random
import threading
from collections import Counter
from pathlib import Path

import pytest

from session_ledger.api.settings import Settings
from tests.conftest import make_ledger, make_settings

PER_WRITER = 500


def append_many(settings_json: str, writer: str) -> None:
    ledger = make_ledger(Settings.model_validate_json(settings_json))
    try:
        for i in range(PER_WRITER):
            ledger.put("race", {"role": "user", "content": f"{writer}:{i}"})
    finally:
        ledger.close()


def check_all_stored_once(settings: Settings, writers: list[str]) -> None:
    ledger = make_ledger(settings)
    try:
        contents = [m.content or "" for m in ledger.get_all("race")]
        assert len(contents) == PER_WRITER * len(writers)
        assert Counter(contents) == Counter(f"{w}:{i}" for w in writers for i in range(PER_WRITER))
        for w in writers:  # each writer's messages in the order it wrote them
            mine = [int(c.split(":")[1]) for c in contents if c.startswith(f"{w}:")]
            assert mine == sorted(mine)
        assert ledger.head("race").version == 1 + PER_WRITER * len(writers)
    finally:
        ledger.close()


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_two_threads_append_to_one_session(store: str, tmp_path: Path) -> None:
    settings = make_settings(store, tmp_path)
    make_ledger(settings).close()
    threads = [
        threading.Thread(target=append_many, args=(settings.model_dump_json(), w))
        for w in ("a", "b")
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    check_all_stored_once(settings, ["a", "b"])


@pytest.mark.slow
@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_two_processes_append_to_one_session(store: str, tmp_path: Path) -> None:
    settings = make_settings(store, tmp_path)
    make_ledger(settings).close()
    spawn = multiprocessing.get_context("spawn")
    processes = [
        spawn.Process(target=append_many, args=(settings.model_dump_json(), w)) for w in ("p", "q")
    ]
    for p in processes:
        p.start()
    for p in processes:
        p.join(timeout=240)
        assert p.exitcode == 0
    check_all_stored_once(settings, ["p", "q"])


def test_one_ledger_shared_by_threads(ledger) -> None:  # type: ignore[no-untyped-def]
    """The in-process case: one Ledger object, many threads."""

    def writer(name: str) -> None:
        for i in range(50):
            ledger.put("shared", {"role": "user", "content": f"{name}:{i}"})

    threads = [threading.Thread(target=writer, args=(n,)) for n in "wxyz"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert ledger.head("shared").message_count == 200
    assert len({m.content for m in ledger.get_all("shared")}) == 200


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_write_that_lost_the_race_retries_and_leaves_random_alone(
    store: str, tmp_path: Path
) -> None:
    """A write whose cached session is behind loses on the events' primary key, waits a
    random moment, reloads and succeeds; the wait's draw does not move the application's
    seeded `random` stream."""
    settings = make_settings(store, tmp_path)
    first, second = make_ledger(settings), make_ledger(settings)
    try:
        first.put("race", {"role": "user", "content": "a"})
        second.put("race", {"role": "user", "content": "b"})  # first's cache is now behind
        if store == "postgres":
            # psycopg_pool draws from the module's `random` for each connection it opens
            # (the jitter of its expiry), in its own threads while it fills: wait until
            # both pools are full, so only the ledger's code runs while the seed holds.
            for ledger in (first, second):
                ledger.recorder.datastore.pool.wait(timeout=30)
        random.seed(42)
        seeded = random.getstate()
        # An idempotency key takes the general path, which saves from the cached state.
        result = first.put("race", {"role": "user", "content": "c"}, idempotency_key="c-1")
        assert random.getstate() == seeded
        assert (result.version, result.message_count, result.replayed) == (4, 3, False)
        assert [m.content for m in second.get_all("race")] == ["a", "b", "c"]
        assert first.verify("race").intact
    finally:
        first.close()
        second.close()
