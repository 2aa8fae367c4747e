"""`make bench-floor` (bench/put_floor.py) compares a put with a floor that writes the
same rows: the floor's session must be what the ledger's own puts would have made."""

from __future__ import annotations

from pathlib import Path

from bench.put_floor import measure, table
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.projections.rebuild import check


def test_the_floor_writes_what_a_put_writes(tmp_path: Path) -> None:
    result = measure(tmp_path, rounds=2, block=5, warm=4)
    assert set(result["put_us"]) == {"ledger", "floor", "raw"}
    assert all(us > 0 for us in result["put_us"].values())
    assert table(result).count("\n") == 4

    ledger = open_ledger(Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}"))
    try:
        floor, own = ledger.head("floor"), ledger.head("ledger")
        # 4 warm-up puts by the ledger, 4 by the floor, then 2 blocks of 5.
        assert (floor.version, floor.message_count) == (1 + 4 + 4 + 10, 18)
        assert (own.version, own.message_count) == (1 + 4 + 10, 14)
        assert ledger.verify("floor").intact
        assert len(ledger.get_all("floor")) == 18
        assert ledger.head("floor").token_total > 0
        # Views rebuilt from the events equal the ones the floor wrote, row for row.
        assert check(ledger.recorder, ledger.mapper, ledger.tokenizer) == []
    finally:
        ledger.close()
