"""No class of the domain or the projections has more than one project-defined base class
(issue 52, "compose, don't mix in"): a class holds the collaborators it was given instead
of inheriting them. Protocols and ABCs (ports), and the library's and Python's classes,
do not count. Read from the source with `ast`, by class name."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("domain", "projections")


def _name(node: ast.expr) -> str:
    if isinstance(node, ast.Subscript):
        return _name(node.value)
    if isinstance(node, ast.Attribute):
        return node.attr
    return node.id if isinstance(node, ast.Name) else ""


def _classes() -> dict[str, list[tuple[str, list[str], bool]]]:
    """Each class name: where it is defined, its bases' names, whether it is a port (a
    Protocol or an ABC)."""
    found: dict[str, list[tuple[str, list[str], bool]]] = {}
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ClassDef):
                    bases = [_name(b) for b in node.bases]
                    port = bool({"Protocol", "ABC"} & set(bases)) or any(
                        k.arg == "metaclass" and _name(k.value) == "ABCMeta" for k in node.keywords
                    )
                    where = f"{path.relative_to(ROOT)}:{node.lineno}"
                    found.setdefault(node.name, []).append((where, bases, port))
    return found


def _project_bases(
    bases: list[str], classes: dict[str, list[tuple[str, list[str], bool]]]
) -> list[str]:
    return [b for b in bases if b in classes and not any(port for _, _, port in classes[b])]


def test_no_class_has_more_than_one_project_base() -> None:
    classes = _classes()
    mixed = [
        f"{where} {name}({', '.join(bases)})"
        for name, defs in classes.items()
        for where, bases, _ in defs
        if len(_project_bases(bases, classes)) > 1
    ]
    assert mixed == [], "compose these instead of inheriting several of our own classes"


def test_the_check_sees_a_mixin_stack() -> None:
    classes = {"A": [("a", [], False)], "B": [("b", [], False)], "P": [("p", ["Protocol"], True)]}
    assert _project_bases(["A", "B", "Application"], classes) == ["A", "B"]
    assert _project_bases(["A", "P", "Exception"], classes) == ["A"]
