"""`python -m bench.put_phases` times the phases of real puts in place, nested as the
write path nests them, times the COMMIT of the ledger's puts and of raw sqlite3's beside
them, and leaves the code and the connections as it found them."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.put_phases import COMMIT, PATHS, RAW_COMMIT, measure, table
from session_ledger.domain.session import Session
from session_ledger.domain.tokens import NamedTokenizer
from session_ledger.projections import sqlite as sqlite_store


def test_phases_nest_and_every_one_is_timed_on_the_general_path(tmp_path: Path) -> None:
    originals = (Session.trigger_event, NamedTokenizer.count, sqlite_store.view_changes)
    result = measure("sqlite", 20, tmp_path, "general")
    phases = result["phases_us"]
    PHASES = PATHS["general"]
    assert set(phases) == {phase for _, _, phase in PHASES} | {COMMIT, RAW_COMMIT}
    assert all(us > 0 for us in phases.values())
    write, save, insert = (phases[p] for _, _, p in PHASES[:3])
    assert insert <= save <= write <= result["put_us"]
    assert phases["apply_changes: the view rows"] + phases[COMMIT] <= insert
    assert 0 < phases[RAW_COMMIT] <= result["raw_put_us"]
    assert set(result["commit_median_us"]) == {COMMIT, RAW_COMMIT}
    assert result["puts"] == 20
    assert (Session.trigger_event, NamedTokenizer.count, sqlite_store.view_changes) == originals
    assert table(result).count("\n") == len(PHASES) + 5  # + COMMIT, raw put, raw COMMIT


def test_the_short_path_is_what_puts_take_and_is_timed(tmp_path: Path) -> None:
    result = measure("sqlite", 20, tmp_path)
    phases = result["phases_us"]
    assert set(phases) == {phase for _, _, phase in PATHS["short"]} | {COMMIT, RAW_COMMIT}
    assert all(us > 0 for us in phases.values())
    short, rows = (phases[p] for _, _, p in PATHS["short"][:2])
    assert phases[COMMIT] <= rows <= short <= result["put_us"]
    assert result["path"] == "short"
    assert table(result).count("\n") == len(PATHS["short"]) + 5


def test_the_connections_commit_untimed_afterwards(tmp_path: Path) -> None:
    """The wrapped commits are put back: a put after the measurement is not counted."""
    from bench import put_phases

    made: list[object] = []
    original = put_phases.commits_timed

    def spy(owner: object, attribute: str):  # type: ignore[no-untyped-def]
        cm = original(owner, attribute)
        made.append((owner, attribute, getattr(owner, attribute)))
        return cm

    put_phases.commits_timed = spy
    try:
        measure("sqlite", 10, tmp_path)
    finally:
        put_phases.commits_timed = original
    assert len(made) == 2
    for owner, attribute, conn in made:
        assert getattr(owner, attribute) is conn
        assert not isinstance(conn, put_phases.TimedCommits)


@pytest.mark.parametrize("path", sorted(PATHS))
def test_a_memory_store_has_no_commit_to_time(tmp_path: Path, path: str) -> None:
    result = measure("memory", 10, tmp_path, path)
    assert set(result["phases_us"]) == {phase for _, _, phase in PATHS[path]}
    assert all(us > 0 for us in result["phases_us"].values())
    assert "raw_put_us" not in result
    assert table(result).count("\n") == len(PATHS[path]) + 2
