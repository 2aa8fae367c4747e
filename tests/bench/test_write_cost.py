"""The write-cost diagnostic (bench/diagnostics/write_cost.py) reads a real WAL correctly:
the frames of each commit, and the b-tree each frame's page belongs to; and it counts a
ledger's puts through the public API alone."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from bench.anchors.raw_sqlite import RawSQLite
from bench.corpus import conversation
from bench.diagnostics import write_cost
from bench.diagnostics.write_cost import btree_names, cost, stores, table, wal_commits
from bench.ledger import LedgerStore

pytestmark = pytest.mark.bench


def test_each_commit_lists_the_pages_of_the_tables_and_indexes_it_changed(
    tmp_path: Path,
) -> None:
    db = tmp_path / "t.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute("PRAGMA wal_autocheckpoint=0")
    conn.execute("CREATE TABLE t (id INTEGER PRIMARY KEY, k TEXT, v TEXT)")
    conn.execute("CREATE INDEX t_k ON t (k)")
    conn.execute("CREATE TABLE untouched (x)")
    before = len(wal_commits(db.with_name("t.db-wal")))
    for i in range(3):
        conn.execute("INSERT INTO t (k, v) VALUES (?, ?)", (f"k{i}", "v" * 100))
    commits = wal_commits(db.with_name("t.db-wal"))[before:]
    names = btree_names(db)
    conn.close()
    assert len(commits) == 3  # autocommit: one transaction per INSERT
    for pages in commits:
        touched = {names.get(p) for p in pages}
        assert {"t", "t_k"} <= touched  # the row and its index entry
        assert "untouched" not in touched


def test_every_store_is_counted_commit_by_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(write_cost, "WARM_WRITES", 5)
    messages = conversation(5 + 20)
    costs = []
    for store, file in stores():
        workdir = tmp_path / file.removesuffix(".db")
        workdir.mkdir()
        costs.append(cost(store, file, workdir, messages, writes=20, sessions=2))
    assert [c.store for c in costs][:2] == [LedgerStore("sqlite").name, "raw sqlite3 WAL+FULL"]
    for c in costs:
        assert c.writes == 20 and c.write_us > 0
        # Every durable write commits at least one page: the row's.
        assert c.frames_per_write >= 1
    ledger = costs[0].by_btree
    assert any(name.startswith("ledger_") for name in ledger), ledger
    assert table(costs).count("\n") == len(costs) + 1


def test_a_leaf_that_fills_up_is_counted_as_a_write_of_more_than_one_page(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Rows of ~400 characters fill a 4 KiB leaf in under ten writes: among 40, some
    change more than one page of the raw store's table, and each of those at least two."""
    monkeypatch.setattr(write_cost, "WARM_WRITES", 5)
    workdir = tmp_path / "raw"
    workdir.mkdir()
    found = cost(RawSQLite(), "raw-sqlite3.db", workdir, conversation(45), writes=40, sessions=1)
    share, pages = found.splits["messages"]
    assert 0 < share < 1 and pages >= 2
    assert found.by_btree["messages"] == pytest.approx(1 + share * (pages - 1))
