"""The write-cost diagnostic (bench/write_cost.py) reads a real WAL correctly: the
frames of each commit, and the b-tree each frame's page belongs to."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from bench.write_cost import btree_names, wal_commits


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
