"""Read replicas against a real streaming standby (made by the tests: tests/postgres_pair.py):
reads are served by the standby; a read never returns a version older than one the caller
holds (`min_version`) or this process wrote, however far the standby trails; a standby
that trails too far, or is down, leaves the rotation (reads go to the primary, no error)
and comes back by itself."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.replicas import ReplicaSet
from tests.conftest import make_settings
from tests.postgres_pair import PostgresPair

pytestmark = [pytest.mark.postgres, pytest.mark.slow]


@pytest.fixture
def pair(postgres_pair: PostgresPair) -> PostgresPair:
    return postgres_pair


def settings(pair: PostgresPair, tmp_path: Path, **overrides: Any) -> Settings:
    values: dict[str, Any] = {
        "read_database_urls": pair.standby_url, "replica_check_seconds": 0.1,
        "replica_wait_ms": 20, "replica_max_lag_seconds": 30, **overrides,
    }  # fmt: skip
    s = make_settings("postgres", tmp_path, **values)
    s.database_url = pair.primary_url
    return s


def until(condition: Callable[[], bool], what: str, seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting until {what}"
        time.sleep(0.02)


def replicas(ledger: Ledger) -> ReplicaSet:
    routing = ledger.views.read_routing
    assert isinstance(routing, ReplicaSet)
    return routing


def serving(ledger: Ledger) -> bool:
    return all(s.serving for s in replicas(ledger).standbys)


@pytest.fixture
def reader(pair: PostgresPair, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger that reads from the standby."""
    ledger = open_ledger(settings(pair, tmp_path))
    until(lambda: serving(ledger), "the standby serves reads")
    yield ledger
    ledger.close()


@pytest.fixture
def writer(pair: PostgresPair, reader: Ledger, tmp_path: Path) -> Iterator[Ledger]:
    """A ledger on the primary only, in the reader's tenant: the reader knows nothing of
    its writes but what the caller tells it (`min_version`)."""
    s = make_settings("postgres", tmp_path, default_tenant=reader.default_tenant)
    s.database_url = pair.primary_url
    ledger = open_ledger(s)
    yield ledger
    ledger.close()


def rows_read(ledger: Ledger) -> tuple[int, int]:
    """View rows read so far on (the primary, the standby)."""
    return ledger.views.rows_read, replicas(ledger).standbys[0].views.rows_read  # type: ignore[attr-defined]


def message(i: int) -> dict[str, str]:
    return {"role": "user", "content": f"message {i}"}


def test_reads_are_served_by_the_standby(reader: Ledger, writer: Ledger) -> None:
    key = f"k-{uuid.uuid4().hex}"
    version = writer.put(key, message(0)).version
    before = rows_read(reader)
    read = reader.window(key, min_version=version)
    after = rows_read(reader)
    assert read.version == version and len(read) == 1
    assert after[0] == before[0], "the primary read no view rows"
    assert after[1] > before[1], "the standby read the window's rows"
    assert reader.history(key, min_version=version).version == version
    assert reader.head(key, min_version=version).version == version

    def in_recovery(views: Any) -> bool:
        with views.snapshot() as read:
            return bool(read.tuples("SELECT pg_is_in_recovery()", ())[0][0])

    # The views the reads were given answer from a server in recovery: the standby.
    assert replicas(reader).read(None, 0, in_recovery) is True
    assert in_recovery(reader.views) is False


def test_min_version_never_reads_an_older_version_while_the_standby_lags(
    pair: PostgresPair, reader: Ledger, writer: Ledger
) -> None:
    key = f"k-{uuid.uuid4().hex}"
    first = writer.put(key, message(0)).version
    until(lambda: reader.window(key).version == first, "the standby has the session")
    pair.replay(paused=True)
    try:
        version = writer.put(key, message(1)).version
        # The control: the standby serves reads and trails, so without the version it
        # answers an older state (what min_version must prevent below).
        assert reader.window(key).version < version
        stale_reads = 0
        for i in range(2, 1002):
            if i == 500:
                pair.replay(paused=False)  # the second half: the standby catches up
            version = writer.put(key, message(i)).version
            read = reader.window(key, min_version=version, token_limit=50)
            stale_reads += read.version < version
            assert reader.history(key, min_version=version, offset=i).version >= version
            if i % 50 == 0:  # a version only the primary has yet is no StateNotFound
                past = reader.window(key, as_of_version=version, token_limit=20)
                assert past.version == version
        assert stale_reads == 0
    finally:
        pair.replay(paused=False)


def test_this_process_reads_its_own_writes_while_the_standby_lags(
    pair: PostgresPair, reader: Ledger
) -> None:
    key = f"k-{uuid.uuid4().hex}"
    reader.put(key, message(0))
    pair.replay(paused=True)
    try:
        for i in range(1, 201):
            version = reader.put(key, message(i)).version
            assert reader.window(key, token_limit=20).version == version
            assert reader.head(key).version == version
            assert key in reader.keys(prefix=key)
    finally:
        pair.replay(paused=False)


def test_a_standby_past_the_lag_limit_leaves_the_rotation_and_comes_back(
    pair: PostgresPair, tmp_path: Path, writer: Ledger
) -> None:
    ledger = open_ledger(settings(pair, tmp_path, replica_max_lag_seconds=0.5,
                                  default_tenant=writer.default_tenant))  # fmt: skip
    try:
        until(lambda: serving(ledger), "the standby serves reads")
        pair.replay(paused=True)
        try:
            key = f"k-{uuid.uuid4().hex}"
            version = writer.put(key, message(0)).version
            until(lambda: not serving(ledger), "the lagging standby leaves the rotation")
            assert "trails the primary" in (replicas(ledger).standbys[0].problem or "")
            before = rows_read(ledger)
            assert ledger.window(key).version == version  # the primary answers
            assert rows_read(ledger)[1] == before[1]
        finally:
            pair.replay(paused=False)
        until(lambda: serving(ledger), "the standby is back in the rotation")
    finally:
        ledger.close()


def test_a_stopped_standby_sends_reads_to_the_primary_and_comes_back(
    pair: PostgresPair, reader: Ledger, writer: Ledger
) -> None:
    key = f"k-{uuid.uuid4().hex}"
    version = writer.put(key, message(0)).version
    assert reader.window(key, min_version=version).version == version
    pair.stop_standby()
    try:
        for i in range(1, 51):  # at once, before any check noticed: the failed read retries
            version = writer.put(key, message(i)).version
            assert reader.window(key, min_version=version).version == version
            assert reader.window(key).version == version
        until(lambda: not serving(reader), "the stopped standby leaves the rotation")
    finally:
        pair.start_standby()
    until(lambda: serving(reader), "the restarted standby is back in the rotation")
    before = rows_read(reader)
    assert reader.window(key, min_version=version).version == version
    assert rows_read(reader)[1] > before[1], "the standby serves reads again"


def test_read_urls_need_postgresql(tmp_path: Path) -> None:
    with pytest.raises(InvalidInput, match="LEDGER_READ_DATABASE_URLS"):
        open_ledger(make_settings("sqlite", tmp_path, read_database_urls="postgresql://x/y"))
    s = make_settings("postgres", tmp_path, read_database_urls="sqlite:///x.db")
    with pytest.raises(InvalidInput, match="no postgresql:// URL"):
        open_ledger(s)
