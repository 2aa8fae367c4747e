"""`python -m bench.ab` runs each revision in a worker of its own, which imports
`session_ledger` from that revision's tree and nowhere else, and measures the same
workloads on both in turns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import ab
from bench.ab_sides import ROOT, Side, WorkerError
from tests.conftest import postgres_server_url

pytestmark = pytest.mark.bench


def test_a_worker_imports_the_tree_it_is_given_as_that_tree_lays_itself_out(
    tmp_path: Path,
) -> None:
    tree = tmp_path / "tree"
    for folder in ("core", "web"):
        (tree / folder).mkdir(parents=True)
        (tree / folder / "__init__.py").write_text(f"WHICH = {folder!r}\n")
    (tree / "pyproject.toml").write_text(
        '[tool.setuptools.package-dir]\n"session_ledger.domain" = "core"\n'
        '"session_ledger.api" = "web"\n'
    )
    side = Side("head", tree, "a renamed layout", tmp_path / "scratch", seed=0)
    try:
        # Not the work tree's domain/, which the editable install also offers.
        assert side.imported_from == {
            "session_ledger.api": str((tree / "web" / "__init__.py").resolve()),
            "session_ledger.domain": str((tree / "core" / "__init__.py").resolve()),
        }
        with pytest.raises(WorkerError, match="unknown request 'imported_from'"):
            side.request("imported_from")
        with pytest.raises(WorkerError, match="no sqlite store is open"):
            side.request("block", store="sqlite", workload="W1", calls=1)
    finally:
        side.close()
    assert side.process.returncode == 0


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_work_tree_against_head_in_turns(
    tmp_path: Path, store: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    if store == "postgres":
        monkeypatch.setenv("LEDGER_BENCH_POSTGRES_URL", postgres_server_url())
    out, workdir = tmp_path / "out", tmp_path / "work"
    record = ab.main(
        ["--base", "HEAD", "--quick", "--pairs", "2", "--rounds", "2", "--stores", store,
         "--workdir", str(workdir), "--out", str(out)]
    )  # fmt: skip
    assert record["sides"]["base"].startswith("HEAD (")
    assert record["sides"]["head"].startswith("worktree (")
    assert len(record["imported_from"]) == 2  # a pair of workers, then another
    for pair in record["imported_from"]:
        base, head = (pair[side]["session_ledger.domain"] for side in ab.SIDES)
        assert Path(base).is_relative_to(workdir.resolve())  # the export of HEAD
        assert Path(head) == ROOT / "domain" / "__init__.py"
    results = record["results"][store]
    assert set(results) == {"W1", "W3", "W4"}
    for figures in results.values():
        assert len(figures["round_ratios"]) == 2 * 2 and len(figures["pair_ratios"]) == 2
        assert figures["base"] > 0 and figures["head"] > 0
    assert record["table_markdown"].count("\n") == 1 + 3
    (written,) = out.glob("ab-*.json")
    assert json.loads(written.read_text())["results"] == json.loads(json.dumps(record["results"]))
    assert list(workdir.iterdir()) == []  # the exports and the stores are gone


def test_w0_starts_a_session_with_each_put(tmp_path: Path) -> None:
    from bench.ab_worker import Worker

    worker = Worker()
    worker.open("sqlite", str(tmp_path), None, history=0, w1_messages=4)
    try:
        for _ in range(2):
            assert len(worker.block("sqlite", "W0", calls=3)["us"]) == 3
        ledger = worker.stores["sqlite"].ledger
        heads = [ledger.head(f"w0-{n}") for n in range(6)]
        assert [head.message_count for head in heads] == [1] * 6
    finally:
        worker.close("sqlite")
