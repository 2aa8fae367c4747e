"""No import cycles among the project's modules (issue 52): the graph of `session_ledger.*`
imports, read from the source with `ast`, has no cycle but the known ones listed here
(none now).

Every import statement is an edge: at module level, inside a function, or under
`if TYPE_CHECKING:`. An import deferred into a function (or kept for types only) avoids
the half-made module at import time, but the two modules still need each other: neither
can be read, tested or replaced alone, and the deferral only hides the cycle. The
composition root and the commands defer heavy imports into functions too; those are
edges like any other, and they form no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = {"domain": "session_ledger.domain", "projections": "session_ledger.projections",
            "api": "session_ledger.api"}  # fmt: skip

# Cycles not broken yet, each as its modules in sorted order; a cycle not listed here
# fails the test, and so does one listed here once it is broken (remove it then).
KNOWN_CYCLES: set[tuple[str, ...]] = set()


def modules() -> dict[str, Path]:
    found = {}
    for folder, package in PACKAGES.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            parts = path.relative_to(ROOT / folder).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            found[".".join((package, *parts))] = path
    return found


def _is_package(path: Path) -> bool:
    return path.name == "__init__.py"


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The project's modules that importing `name` imports (the nearest known module of
    each name imported: `from .x import y` is `x.y` when y is a module, else `x`)."""
    package = name if _is_package(path) else name.rpartition(".")[0]
    targets: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            names = [f"{base}.{alias.name}" for alias in node.names]
        else:
            continue
        for imported in names:
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
    return targets


def import_graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def cycles(graph: dict[str, set[str]]) -> set[tuple[str, ...]]:
    """The strongly connected components of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: set[tuple[str, ...]] = set()

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in sorted(graph.get(node, ())):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.add(tuple(sorted(component)))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_graph_is_read_from_every_layer() -> None:
    graph = import_graph()
    assert "session_ledger.domain.ledger" in graph["session_ledger.api.bootstrap"]
    assert "session_ledger.api.settings" in graph["session_ledger.api.app"]
    # `from ..bootstrap import open_ledger` inside a function of a subpackage
    assert "session_ledger.api.bootstrap" in graph["session_ledger.api.cli.common"]


def test_no_import_cycles_but_the_known_ones() -> None:
    found = cycles(import_graph())
    assert found - KNOWN_CYCLES == set(), "new import cycles"
    assert KNOWN_CYCLES - found == set(), "cycles broken: remove them from KNOWN_CYCLES"


def test_a_cycle_is_found() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == {("a", "b", "c")}
