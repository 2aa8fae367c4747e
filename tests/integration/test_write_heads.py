"""A put on SQLite takes the chain hash and token total of the row before from what the
process's last write of the session noted (projections/write_heads.py), not from the
store; and stops trusting the note once another connection has written."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tests.conftest import make_ledger, make_settings


def _timeline(path: Path, key: str) -> list[tuple[int, int, bytes]]:
    with sqlite3.connect(path) as conn:
        return conn.execute(
            "SELECT t.version, t.token_total, t.chain FROM ledger_timeline t JOIN ledger_sessions"
            " s ON s.session_id = t.session_id WHERE s.session_key = ? ORDER BY t.version",
            (key,),
        ).fetchall()


def test_an_append_reads_no_row_of_the_timeline(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path)
    ledger = make_ledger(settings)
    try:
        for i in range(3):
            ledger.put("k", {"role": "user", "content": f"one two {i}"})
        views: Any = ledger.views
        statements: list[str] = []
        with views.dialect.write_transaction() as cursor:  # the pool's writer connection
            cursor.connection.set_trace_callback(statements.append)
        for i in range(3):
            ledger.put("k", {"role": "user", "content": f"three four five {i}"})
        written = [s for s in statements if s.startswith("INSERT INTO ledger_timeline")]
        assert len(written) == 3  # the puts were traced
        assert not [s for s in statements if "SELECT" in s and "ledger_timeline" in s]
        assert [m.content for m in ledger.get_all("k")][-1] == "three four five 2"
        assert ledger.head("k").token_total == 3 * 3 + 3 * 4
        # A removal ends rows (the note is dropped), another ledger on the file writes:
        # the puts after them chain on and count on as the store says.
        ledger.delete_message("k", 1)
        ledger.put("k", {"role": "user", "content": "c d e"})
        other = make_ledger(settings)
        try:
            other.put("k", {"role": "user", "content": "f"})
        finally:
            other.close()
        ledger.put("k", {"role": "user", "content": "g h"})
        report = ledger.verify("k")
        assert report.intact and report.versions == 11, report  # with the start, v1
        texts = [str(m.content) for m in ledger.get_all("k")]
        assert ledger.head("k").token_total == sum(len(t.split()) for t in texts)
    finally:
        ledger.close()


def test_a_row_another_connection_changed_is_read_again(tmp_path: Path) -> None:
    """Another process rewriting the views in place (a rebuild, here one UPDATE) leaves
    the note of the row it changed behind: the next put reads the row again."""
    settings = make_settings("sqlite", tmp_path)
    ledger = make_ledger(settings)
    try:
        for i in range(3):
            ledger.put("k", {"role": "user", "content": f"one two {i}"})
        path = Path(settings.database_url.removeprefix("sqlite:///"))
        with sqlite3.connect(path) as other:
            other.execute("UPDATE ledger_timeline SET token_total = token_total + 100")
        ledger.put("k", {"role": "user", "content": "three four"})
        rows = _timeline(path, "k")
        assert rows[-1][1] == rows[-2][1] + 2 == 3 * 3 + 100 + 2
    finally:
        ledger.close()
