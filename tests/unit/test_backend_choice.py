"""The composition root (api/bootstrap.py) is the only module that picks a backend: of the
project's modules, only it names a concrete backend class, that is a store a database URL
picks (the ledger's persistence factory, the API key table, the limit store, on SQLite or
PostgreSQL), besides the module that defines it. Everything else holds the port
(`Ledger`, `KeyStore`, `LimitStore`) it is handed. Read from the source (AST) of domain/,
projections/ and api/: a name, an attribute, an import or a string ("module:Class")."""

from __future__ import annotations

import ast
import re

import pytest

from tests.source_trees import parsed_sources

COMPOSITION_ROOT = "api/bootstrap.py"
BACKEND_CLASS = re.compile(r"(SQLite|Postgres)\w*(Store|Table|Factory)")
# What the URL picks on each backend: the rule above must keep finding them.
PICKED = {
    "SQLiteLedgerFactory", "PostgresLedgerFactory", "SQLiteKeyTable", "PostgresKeyTable",
    "SQLiteLimitStore", "PostgresLimitStore",
}  # fmt: skip


def backend_classes(trees: dict[str, ast.Module]) -> dict[str, str]:
    """Each concrete backend class the project defines, and the module defining it."""
    return {
        node.name: module
        for module, tree in trees.items()
        for node in ast.walk(tree)
        if isinstance(node, ast.ClassDef) and BACKEND_CLASS.fullmatch(node.name)
    }


def named(tree: ast.Module) -> dict[str, int]:
    """Every identifier the module names, with the line of its first mention: names,
    attributes, imported names, and identifiers inside string constants."""
    found: dict[str, int] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            words = [node.id]
        elif isinstance(node, ast.Attribute):
            words = [node.attr]
        elif isinstance(node, ast.alias):
            words = node.name.split(".")
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            words = re.findall(r"\w+", node.value)
        else:
            continue
        for word in words:
            found.setdefault(word, getattr(node, "lineno", 0))
    return found


def naming_backends(trees: dict[str, ast.Module], classes: dict[str, str]) -> list[str]:
    """`module:line: Class` wherever a module other than the root and the class's own
    names a concrete backend class."""
    return [
        f"{module}:{line}: {word}"
        for module, tree in trees.items()
        if module != COMPOSITION_ROOT
        for word, line in sorted(named(tree).items())
        if word in classes and classes[word] != module
    ]


def test_the_backends_picked_by_a_url_are_found() -> None:
    assert set(backend_classes(parsed_sources())) >= PICKED


def test_only_the_composition_root_names_a_backend() -> None:
    trees = parsed_sources()
    assert naming_backends(trees, backend_classes(trees)) == []


@pytest.mark.parametrize(
    ("code", "caught"),
    [
        ("from .api_key_table import SQLiteKeyTable\n", 1),
        ("def f(url):\n    return rate_limit_store.PostgresLimitStore(url)\n", 1),
        ("FACTORY = 'session_ledger.projections.sqlite:SQLiteLedgerFactory'\n", 1),
        ("def f(store: KeyStore) -> None:\n    store.close()\n", 0),
    ],
)
def test_a_backend_named_elsewhere_is_found(code: str, caught: int) -> None:
    classes = {"SQLiteKeyTable": "projections/api_key_table.py",
               "PostgresLimitStore": "projections/rate_limit_store.py",
               "SQLiteLedgerFactory": "projections/sqlite.py"}  # fmt: skip
    assert len(naming_backends({"api/other.py": ast.parse(code)}, classes)) == caught
