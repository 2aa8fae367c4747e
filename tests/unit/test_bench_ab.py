"""The A/B runner's arithmetic (bench/blocks.py, bench/ab.py): the two sides take turns,
each going first every other round; head/base is taken round by round and its median
reported; the table says which workloads lose more than the tolerance; a revision's
package folders are found in its own pyproject.toml."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.ab import block_figure, change, parse, per_pair, table
from bench.ab_sides import import_dir, package_dirs
from bench.blocks import Comparison, median_interval, turn_orders


def test_the_side_that_goes_first_changes_every_round() -> None:
    assert turn_orders(["base", "head"], 4) == [
        ["base", "head"],
        ["head", "base"],
        ["base", "head"],
        ["head", "base"],
    ]
    orders = turn_orders("abc", 3)
    assert [order[0] for order in orders] == ["a", "b", "c"]
    assert all(sorted(order) == ["a", "b", "c"] for order in orders)


def test_head_over_base_is_the_median_of_the_rounds_ratios() -> None:
    # Round by round the head takes 10% longer, while the machine slows down fourfold.
    c = Comparison(base_blocks=(100.0, 200.0, 400.0), head_blocks=(110.0, 220.0, 440.0))
    assert c.block_ratios == pytest.approx([1.1, 1.1, 1.1])
    assert c.ratio == pytest.approx(1.1)
    assert (c.base, c.head) == (200.0, 220.0)
    # Not the ratio of the medians: a slow round of one side moves the medians only.
    skewed = Comparison(base_blocks=(100.0, 100.0, 300.0), head_blocks=(300.0, 101.0, 290.0))
    assert skewed.head / skewed.base == pytest.approx(2.9)
    assert skewed.ratio == pytest.approx(1.01)


def test_a_comparison_needs_a_block_of_each_side_every_round() -> None:
    with pytest.raises(ValueError, match="one block of each side per round"):
        Comparison(base_blocks=(1.0, 2.0), head_blocks=(1.0,))
    with pytest.raises(ValueError):
        Comparison(base_blocks=(), head_blocks=())


def test_a_put_block_is_its_mean_and_a_read_block_its_median_in_ms() -> None:
    assert block_figure("W1", [100.0, 200.0, 600.0]) == 300.0  # µs, as W1's rate counts
    assert block_figure("W0", [100.0, 200.0, 600.0]) == 300.0
    assert block_figure("W3", [100.0, 200.0, 60_000.0]) == 0.2  # ms: an outlier read aside


def test_the_table_marks_a_loss_beyond_the_tolerance() -> None:
    results = {
        "sqlite": {
            "W1": Comparison((400.0, 410.0), (412.0, 422.3)),  # 3% slower
            "W4": Comparison((10.0, 10.0), (11.0, 11.0)),  # 10% slower
        },
        "postgres": {"W3": Comparison((2.0, 2.0), (1.5, 1.5))},
    }
    rows = table(results, tolerance=0.05, pairs=2).splitlines()
    assert "head/base <= 1.05" in rows[0]
    assert len(rows) == 2 + 3
    w1, w4, w3 = rows[2:]
    assert w1.startswith(
        "| W1 | sqlite | µs a put | 405 | 417 | 1.030 | 1.030-1.030 | 3.0% slower | yes |"
    )
    assert w4.endswith("| 1.100 | 1.100-1.100 | 10.0% slower | NO | 1.100, 1.100 | 1.100, 1.100 |")
    assert "| 0.750 | 0.750-0.750 | 25.0% faster | yes |" in w3
    assert change(1.0) == "the same"


def test_unknown_workloads_and_stores_are_refused() -> None:
    args = parse(["--base", "HEAD~1"])
    assert (args.head, args.workloads, args.stores) == ("worktree", ["W1", "W3", "W4"],
                                                        ["sqlite", "postgres"])  # fmt: skip
    with pytest.raises(SystemExit):
        parse(["--base", "HEAD~1", "--workloads", "W1,W9"])
    with pytest.raises(SystemExit):
        parse(["--base", "HEAD~1", "--stores", "mysql"])
    with pytest.raises(SystemExit):
        parse(["--workloads", "W1"])  # no base


def test_a_revision_is_imported_as_its_own_pyproject_lays_it_out(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    for folder in ("core", "views", "web"):
        (tree / folder).mkdir(parents=True)
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"session_ledger.domain" = "core"\n'
        '"session_ledger.views" = "views"\n"session_ledger.api" = "web"\n'
        '"session_ledger.api.routes" = "web/routes"\n"other.thing" = "x"\n'
    )
    assert package_dirs(tree) == {
        "domain": tree / "core",
        "views": tree / "views",
        "api": tree / "web",
    }
    imports = import_dir(tree, tmp_path / "imports")
    package = imports / "session_ledger"
    assert (package / "__init__.py").read_text() == ""  # a regular package: nothing merges in
    assert {p.name: p.resolve() for p in package.iterdir() if p.is_symlink()} == {
        "domain": (tree / "core").resolve(),
        "views": (tree / "views").resolve(),
        "api": (tree / "web").resolve(),
    }
    (tree / "pyproject.toml").write_text('[project]\nname = "x"\n')
    with pytest.raises(ValueError, match="maps no session_ledger subpackage"):
        package_dirs(tree)


def test_the_interval_of_the_median_ratio_follows_the_binomial_tails() -> None:
    values = [float(v) for v in range(1, 21)]  # 20 rounds: the 6th to the 15th value
    assert median_interval(values) == (6.0, 15.0)
    assert median_interval(list(reversed(values))) == (6.0, 15.0)
    assert median_interval([3.0, 1.0, 2.0]) == (1.0, 3.0)  # too few: their whole range
    eight = [float(v) for v in range(8)]
    assert median_interval(eight) == (0.0, 7.0)
    assert median_interval([*eight, 8.0]) == (1.0, 7.0)  # nine: the 2nd to the 8th
    c = Comparison(tuple([1.0] * 20), tuple(values))
    assert c.ratio_interval == (6.0, 15.0)


def test_each_pair_of_processes_has_its_median_ratio() -> None:
    """One worker process can be a few percent faster than another for a whole run: the
    pairs, one after the other, show it."""
    c = Comparison((1.0,) * 6, (1.0, 1.1, 1.2, 0.9, 0.8, 0.7))
    assert per_pair(c, 2) == pytest.approx([1.1, 0.8])
    assert per_pair(c, 1) == pytest.approx([0.95])
