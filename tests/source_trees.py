"""The project's own modules, parsed, for the tests that check its structure (which
module may name which class, what crosses a port)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LAYERS = ("domain", "projections", "api")


def parsed_sources(folders: tuple[str, ...] = LAYERS) -> dict[str, ast.Module]:
    """Each module below `folders`, by its path from the project's root (`api/app.py`)."""
    found = {}
    for folder in folders:
        for path in sorted((ROOT / folder).rglob("*.py")):
            found[path.relative_to(ROOT).as_posix()] = ast.parse(path.read_text("utf-8"))
    return found
