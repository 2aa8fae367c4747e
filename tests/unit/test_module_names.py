"""Each module of domain/, projections/ and api/ has a file name of its own (issue 52):
one search for a file name finds the one module that holds what the name says. Two
`streams.py` (the domain's stream commands, the streams view, the stream routes) make a
reader open each to learn which is meant; a route module is `*_routes.py` where its
subject's name is taken, a view part's module names the view.

Package markers (`__init__.py`) are not modules of their own and may repeat.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("domain", "projections", "api")


def modules_by_file_name() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name != "__init__.py":
                found[path.name].append(str(path.relative_to(ROOT)))
    return found


def test_the_folders_hold_modules() -> None:
    # a moved tree would otherwise pass with nothing to compare
    assert sum(len(paths) for paths in modules_by_file_name().values()) > 50


def test_no_two_modules_share_a_file_name() -> None:
    shared = {name: paths for name, paths in modules_by_file_name().items() if len(paths) > 1}
    assert not shared, f"modules sharing a file name (rename one to say what it holds): {shared}"
