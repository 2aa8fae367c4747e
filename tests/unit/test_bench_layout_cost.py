"""`make bench-layouts` (bench/layout_cost.py) stores in each layout what it says it
stores: every put one event, one message row, and the rest of the layout's records."""

from __future__ import annotations

import json
from pathlib import Path

from bench.layout_cost import ROWID_SHIFT, SESSION_NUMBER, Runner, layouts, measure, table

BODY = json.dumps({"role": "user", "blocks": [], "additional_kwargs": {}})


def test_each_layout_stores_its_records_per_put(tmp_path: Path) -> None:
    by_name = {lay.name: lay for lay in layouts(BODY, "a:Topic", b"{}")}
    expected = {  # rows after 3 puts to one session
        "raw": {"messages": 3},
        "ledger": {"ledger_events": 3, "ledger_messages": 3, "ledger_ended_messages": 0,
                   "ledger_sessions": 1, "ledger_timeline": 3},
        "one message table with a live-rows index": {
            "ledger_events": 3, "ledger_messages": 3, "ledger_sessions": 1, "ledger_timeline": 3},
        "session row updated by every put": {"ledger_events": 3, "ledger_messages": 3,
                                             "ledger_sessions": 1, "ledger_timeline": 3},
        "no timeline": {"ledger_events": 3, "ledger_messages": 3, "ledger_sessions": 1,
                        "ledger_timeline": 0},
        "timeline in event row": {"ledger_events": 3, "ledger_messages": 3,
                                  "ledger_sessions": 1, "ledger_timeline": 0},
        "view rows in rowid tables": {"ledger_events": 3, "ledger_messages": 3,
                                      "ledger_sessions": 1, "ledger_timeline": 3},
    }  # fmt: skip
    assert set(by_name) == set(expected)
    for i, (name, rows) in enumerate(expected.items()):
        runner = Runner(by_name[name], tmp_path / f"{i}.db")
        assert runner.block(2) > 0
        assert runner.frames_per_put(1) >= 1  # the put committed pages to the WAL
        assert {table: runner.rows(table) for table in rows} == rows, name
        if name in ("ledger", "view rows in rowid tables"):
            # the head is the newest timeline row: 3 puts of 90 tokens
            total = runner.conn.execute(
                "SELECT token_total FROM ledger_timeline ORDER BY version DESC LIMIT 1"
            ).fetchone()
            assert total == (270,)
        if name == "view rows in rowid tables":  # one integer key: the session's, then the id
            base = SESSION_NUMBER << ROWID_SHIFT
            for view, column in (("ledger_messages", "message_id"), ("ledger_timeline", "version")):
                keys = runner.conn.execute(f"SELECT k - {column} FROM {view}").fetchall()
                assert keys == [(base,)] * 3, view
            plans = runner.conn.execute(
                "EXPLAIN QUERY PLAN SELECT * FROM ledger_timeline WHERE k = 1"
            ).fetchall()
            assert "INTEGER PRIMARY KEY" in plans[0][-1]
        if name == "one message table with a live-rows index":
            live = runner.conn.execute(
                "SELECT count(*) FROM ledger_messages INDEXED BY"
                " ledger_messages_live WHERE valid_to IS NULL"
            )
            assert live.fetchone() == (3,)
            ended = "SELECT name FROM sqlite_master WHERE name = 'ledger_ended_messages'"
            assert runner.conn.execute(ended).fetchone() is None
        if name == "session row updated by every put":
            head = runner.conn.execute("SELECT version, token_total FROM ledger_sessions")
            assert head.fetchone() == (3, 270)
        if name.startswith("timeline in event row"):
            chained = runner.conn.execute("SELECT count(chain) FROM ledger_events").fetchone()
            assert chained == (3,)
        runner.conn.close()


def test_measure_reports_every_layout_against_raw(tmp_path: Path) -> None:
    rows = measure(tmp_path, rounds=2, block=5)
    assert rows[0]["layout"] == "raw"
    assert rows[0]["vs_raw"] == 1.0
    assert all(len(r["blocks_us"]) == 2 and r["frames_per_put"] > 0 for r in rows)
    assert table(rows).count("\n") == len(rows) + 1
