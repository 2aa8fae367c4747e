"""The benchmark's verdicts (bench/report.py): each ratio taken within a repetition, the
median judged against its target; the memory store's ratio to raw is reported beside
W1's target as its ceiling, and judged by none."""

from __future__ import annotations

from bench.report import MEMORY, OURS, RAW, Cells, judge, tables, targets
from bench.workloads import Cell


def _rates(*values: float) -> list[Cell]:
    return [Cell("msg/s", v) for v in values]


def _cells() -> Cells:
    return {
        OURS["sqlite"]: {"W1": _rates(1000, 1200, 900)},
        RAW["sqlite"]: {"W1": _rates(4000, 2000, 2000)},
        MEMORY: {"W1": _rates(1800, 3000, 2600)},
    }


def _judged(cells: Cells) -> dict[str, dict[str, object]]:
    return {j["label"]: j for j in (judge(t, cells) for t in targets(cells, [], []))}


def test_w1_is_judged_from_the_ratios_of_each_repetition() -> None:
    w1 = _judged(_cells())["W1 SQLite: ours / raw msg/s"]
    assert w1["per_rep"] == [0.25, 0.6, 0.45]
    assert w1["median"] == 0.45
    assert w1["holds"] is False


def test_the_memory_store_ratio_is_reported_as_w1s_ceiling_and_judged_by_none() -> None:
    judged = _judged(_cells())
    ceiling = judged["W1 SQLite reference: memory store (no I/O) / raw msg/s"]
    assert ceiling["per_rep"] == [0.45, 1.5, 1.3]
    assert ceiling["median"] == 1.3
    assert ceiling["holds"] is None  # neither PASS nor FAIL
    table = tables(_cells(), list(_cells()), ["W1"], list(judged.values()), [])
    row = next(line for line in table.splitlines() if "reference" in line)
    assert row.endswith("| info |") and "PASS" not in row and "FAIL" not in row
    assert "| W1 SQLite: ours / raw msg/s | 0.450 (0.250, 0.600, 0.450) | >= 0.5 | FAIL |" in table


def test_without_the_memory_store_there_is_no_ceiling_row() -> None:
    cells = _cells()
    del cells[MEMORY]
    assert not any("reference" in label for label in _judged(cells))


def test_the_cost_of_encryption_is_each_stores_encrypted_over_clear_per_repetition() -> None:
    from bench.report import encryption_table

    cells: Cells = {
        OURS["sqlite"]: {"W1": _rates(1000, 800), "W3@100": [Cell("ms", 0.2), Cell("ms", 0.4)]},
        f"{OURS['sqlite']} encrypted": {
            "W1": _rates(900, 800),
            "W3@100": [Cell("ms", 0.3), Cell("ms", None, predicted=1.0)],  # predicted: left out
        },
        f"{OURS['postgres']} HTTP": {"W6 get c1": _rates(100)},  # no encrypted twin: no row
    }
    table = encryption_table(cells)
    assert "| sqlite | W1 (rate) | 0.950 (0.900, 1.00) |" in table
    assert "| sqlite | W3@100 (time) | 1.50 (1.50) |" in table
    assert "postgres" not in table
