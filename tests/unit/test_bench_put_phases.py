"""`python -m bench.put_phases` times the phases of real puts in place, nested as the
write path nests them, and leaves the code as it found it."""

from __future__ import annotations

from pathlib import Path

from bench.put_phases import PHASES, measure, table
from session_ledger.domain.session import Session
from session_ledger.domain.tokens import NamedTokenizer
from session_ledger.projections import sqlite as sqlite_store


def test_phases_nest_and_every_one_is_timed(tmp_path: Path) -> None:
    originals = (Session.trigger_event, NamedTokenizer.count, sqlite_store.view_changes)
    result = measure("sqlite", 20, tmp_path)
    phases = result["phases_us"]
    assert set(phases) == {phase for _, _, phase in PHASES}
    assert all(us > 0 for us in phases.values())
    write, save, insert = (phases[p] for _, _, p in PHASES[:3])
    assert insert <= save <= write <= result["put_us"]
    assert phases["apply_changes: the view rows"] <= insert
    assert (Session.trigger_event, NamedTokenizer.count, sqlite_store.view_changes) == originals
    assert table(result).count("\n") == len(PHASES) + 2
