"""A type name has one meaning across domain/, projections/ and api/ (issue 52): a class
or type alias defined in two modules makes a reader (and an import) pick the wrong one.
The erasure's event is `Session.SessionErased` and the error a read or write of an erased
session raises is `SessionErasedError`; the domain's `WriteResult` is answered over HTTP
as `WriteAnswer`, a page of its `AuditTrail` as `AuditTrailAnswer` and its `SessionHead` as
`SessionHeadAnswer`; a read's `tokenizer=` takes a `TokenizerChoice`, a `Tokenizer` is a
function giving tokens.

Names still defined twice are listed in KNOWN; a new one fails, and so does a listed one
once it is gone (remove it then).
"""

from __future__ import annotations

import ast
import warnings
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("domain", "projections", "api")

# Defined twice still: none (keep it so; a name that must stay twice is listed here).
KNOWN: set[str] = set()


def _type_names(tree: ast.Module) -> list[str]:
    """The classes and type aliases a module defines at its top level (`Name = ...` with
    a capitalised name that is not a CONSTANT)."""
    names = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names.append(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names += [
                t.id for t in targets
                if isinstance(t, ast.Name) and t.id[:1].isupper() and not t.id.isupper()
            ]  # fmt: skip
    return [name for name in names if not name.startswith("_")]


def defined_where() -> dict[str, list[str]]:
    found: dict[str, list[str]] = defaultdict(list)
    for folder in FOLDERS:
        for path in sorted((ROOT / folder).rglob("*.py")):
            for name in _type_names(ast.parse(path.read_text(encoding="utf-8"))):
                found[name].append(str(path.relative_to(ROOT)))
    return found


def test_the_scan_finds_the_types() -> None:
    found = defined_where()
    assert found["SessionErasedError"] == ["domain/errors.py"]
    assert found["SessionErased"] == ["domain/session_events.py"]
    assert found["Tokenizer"] == ["domain/tokens.py"]


def test_no_type_name_is_defined_in_two_modules() -> None:
    twice = {name: paths for name, paths in defined_where().items() if len(paths) > 1}
    new = {name: paths for name, paths in twice.items() if name not in KNOWN}
    assert not new, f"type names defined in two modules (rename one): {new}"
    assert not KNOWN - set(twice), f"no longer defined twice, remove: {KNOWN - set(twice)}"


def test_the_erased_error_keeps_its_old_name_for_callers_that_catch_it() -> None:
    from session_ledger.domain import errors

    with pytest.warns(DeprecationWarning, match="SessionErasedError"):
        from session_ledger.domain.errors import SessionErased
    assert SessionErased is errors.SessionErasedError
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(AttributeError):
            errors.NoSuchError  # noqa: B018
