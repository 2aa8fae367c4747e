"""A benchmark run files its JSON by its options: only the full run replaces latest.json
(the README's table), a quick or filtered one goes to latest-partial.json."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from bench import results
from bench.run import command_line


@dataclasses.dataclass
class Plan:
    reps: int = 1


def write(out: Path, args: list[str]) -> Path:
    runner = SimpleNamespace(window_rows=58, load_averages=[0.5], cells={})
    return results.write(out, Plan(), runner, [], "| table |", command_line(args), 0.0, None)


@pytest.mark.parametrize(
    "args",
    [
        ["--quick"],
        ["--only", "session-ledger sqlite|raw sqlite"],
        ["--workloads", "W1,W2"],
        ["--workloads=W3"],
        ["--reps", "2", "--no-postgres"],
    ],
)
def test_a_quick_or_filtered_run_leaves_latest_json_alone(tmp_path: Path, args: list[str]) -> None:
    (tmp_path / "latest.json").write_text('{"the": "full run"}')
    path = write(tmp_path, args)
    assert json.loads((tmp_path / "latest.json").read_text()) == {"the": "full run"}
    partial = json.loads((tmp_path / "latest-partial.json").read_text())
    assert partial["command"] == command_line(args)
    assert "full" not in path.name


def test_a_full_run_replaces_latest_json(tmp_path: Path) -> None:
    (tmp_path / "latest.json").write_text('{"the": "last full run"}')
    path = write(tmp_path, ["--reps", "3"])
    assert json.loads((tmp_path / "latest.json").read_text())["command"] == (
        "python -m bench.run --reps 3"
    )
    assert path.name.endswith("-full.json")
    assert not (tmp_path / "latest-partial.json").exists()
