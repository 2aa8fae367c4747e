"""The ports are the boundary: outside the composition root (api/bootstrap.py) no code
narrows a port to the class that implements it (`isinstance` / `cast`), and no module
reaches into another module's `_private` names. Read from the source (AST) of domain/,
projections/ and api/."""

from __future__ import annotations

import ast

import pytest

from tests.source_trees import parsed_sources

COMPOSITION_ROOT = "api/bootstrap.py"
# The classes behind the ports (SessionViews, EvidenceStore) and the stores' recorders.
CONCRETE = {
    "projections/views.py": {"SQLViews", "ViewParts"},
    "projections/evidence_rows.py": {"EvidenceRows"},
    "projections/dialect.py": {"Dialect", "ViewRows"},
    "projections/sqlite.py": {"SQLiteLedgerRecorder", "SQLiteDialect"},
    "projections/postgres.py": {"PostgresLedgerRecorder", "PostgresDialect"},
}
# A namedtuple's own API starts with an underscore so as not to clash with its fields.
NAMEDTUPLE_API = {"_replace", "_asdict", "_fields", "_make"}
# eventsourcing's private names that its compatibility module exists to reach (none now).
LIBRARY_PRIVATE: dict[str, set[str]] = {"projections/eventsourcing_compat.py": set()}


def _defined_private(tree: ast.Module) -> set[str]:
    """The `_names` a module defines itself: functions, classes, attributes and names
    assigned, parameters."""
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
            names.add(node.attr)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        elif isinstance(node, ast.arg):
            names.add(node.arg)
    return {n for n in names if n.startswith("_")}


def private_reaches(name: str, tree: ast.Module) -> list[str]:
    """`obj._name` where obj is not self or cls and the module does not define `_name`."""
    allowed = _defined_private(tree) | NAMEDTUPLE_API | LIBRARY_PRIVATE.get(name, set())
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Attribute):
            continue
        attr = node.attr
        if not attr.startswith("_") or attr.startswith("__") or attr in allowed:
            continue
        if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
            continue
        found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def downcasts(name: str, tree: ast.Module, concrete: set[str]) -> list[str]:
    """`isinstance(x, C)` or `cast(C, x)` of a class `C` behind a port."""
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call) or len(node.args) != 2:
            continue
        func = node.func
        called = func.id if isinstance(func, ast.Name) else getattr(func, "attr", None)
        if called not in ("isinstance", "cast"):
            continue
        target = node.args[1] if called == "isinstance" else node.args[0]
        named = {n.id for n in ast.walk(target) if isinstance(n, ast.Name)}
        named |= {n.attr for n in ast.walk(target) if isinstance(n, ast.Attribute)}
        named |= {n.value for n in ast.walk(target) if isinstance(n, ast.Constant)}
        if named & concrete:
            found.append(f"{name}:{node.lineno}: {ast.unparse(node)}")
    return found


def test_the_concrete_classes_named_exist() -> None:
    trees = parsed_sources()
    for module, classes in CONCRETE.items():
        defined = {n.name for n in ast.walk(trees[module]) if isinstance(n, ast.ClassDef)}
        assert classes <= defined, f"{module} no longer defines {classes - defined}"


def test_no_port_is_narrowed_outside_the_composition_root() -> None:
    concrete = set().union(*CONCRETE.values())
    found = [
        problem
        for name, tree in parsed_sources().items()
        if name != COMPOSITION_ROOT
        for problem in downcasts(name, tree, concrete)
    ]
    assert found == []


def test_no_module_reaches_into_another_modules_private_names() -> None:
    found = [
        problem
        for name, tree in parsed_sources().items()
        for problem in private_reaches(name, tree)
    ]
    assert found == []


@pytest.mark.parametrize(
    ("code", "caught"),
    [
        ("def f(ledger):\n    assert isinstance(ledger.views, SQLViews)\n", 1),
        ("def f(ledger):\n    return cast(SQLViews, ledger.views)\n", 1),
        ("def f(ledger):\n    return cast('SQLViews', ledger.views)\n", 1),
        ("def f(x):\n    return isinstance(x, dict)\n", 0),
    ],
)
def test_a_downcast_is_found(code: str, caught: int) -> None:
    assert len(downcasts("api/example.py", ast.parse(code), {"SQLViews"})) == caught


@pytest.mark.parametrize(
    ("code", "caught"),
    [
        ("def f(views):\n    return views._time(1)\n", 1),
        ("def f(views):\n    with views._reading() as read:\n        return read\n", 1),
        ("class A:\n    def f(self):\n        return self._time(1)\n", 0),
        ("def _time(x):\n    return x\ndef f(views):\n    return views._time(1)\n", 0),
        ("def f(row):\n    return row._replace(a=1)\n", 0),
    ],
)
def test_a_private_reach_is_found(code: str, caught: int) -> None:
    assert len(private_reaches("projections/example.py", ast.parse(code))) == caught
