"""The two sides of an A/B run (bench/ab.py): a revision's source tree, and the worker
process (bench/ab_worker.py) that imports `session_ledger` from it.

Two revisions cannot share one Python process (both are `session_ledger`), so each is
exported (`git archive`) to a directory of its own, or is the work tree itself, and a
second directory of symlinks, first on the worker's PYTHONPATH, maps the package to it:
`session_ledger/<sub>` to each folder the revision's pyproject.toml maps
(`[tool.setuptools.package-dir]`), so a revision that adds or renames a subpackage is
imported as it lays itself out. The benchmark code (`bench/`) is this work tree's for
both sides: the same workloads, measured on two products.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import tarfile
import tomllib
from pathlib import Path
from typing import IO, Any

from bench.results import revision

WORKTREE = "worktree"  # the --head (or --base) that means the files as they are now
ROOT = Path(__file__).resolve().parent.parent  # the work tree this bench/ belongs to
PACKAGE = "session_ledger"


class WorkerError(RuntimeError):
    """A side's worker failed a request, or stopped: its message says which and why."""


def git(*args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=ROOT, capture_output=True, check=True).stdout


def source_tree(rev: str, into: Path) -> tuple[Path, str]:
    """(the tree, its label): the work tree for WORKTREE, else `rev` exported into `into`."""
    if rev == WORKTREE:
        return ROOT, f"{WORKTREE} ({revision()})"
    try:
        commit = git("rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}").decode().strip()
    except subprocess.CalledProcessError:
        raise ValueError(f"{rev!r} names no commit of this repository") from None
    into.mkdir(parents=True)
    with tarfile.open(fileobj=io.BytesIO(git("archive", "--format=tar", commit))) as tar:
        tar.extractall(into, filter="data")
    return into, f"{rev} ({commit[:7]})"


def package_dirs(tree: Path) -> dict[str, Path]:
    """`session_ledger`'s top-level subpackages and the folders of `tree` that hold them."""
    config = tomllib.loads((tree / "pyproject.toml").read_text())
    mapping = config.get("tool", {}).get("setuptools", {}).get("package-dir", {})
    out: dict[str, Path] = {}
    for name, folder in mapping.items():
        parent, _, sub = name.partition(".")
        if parent == PACKAGE and sub and "." not in sub:
            out[sub] = tree / folder
    if not out:
        raise ValueError(f"the pyproject.toml of {tree} maps no {PACKAGE} subpackage")
    return out


def import_dir(tree: Path, into: Path) -> Path:
    """A directory which, first on sys.path, makes `import session_ledger` the tree's."""
    package = into / PACKAGE
    package.mkdir(parents=True)
    # A regular package, not a namespace one: no other entry of sys.path (the editable
    # install of a work tree, say) can add its folders to it.
    (package / "__init__.py").write_text("")
    for sub, folder in package_dirs(tree).items():
        (package / sub).symlink_to(folder.resolve(), target_is_directory=True)
    return into


class Side:
    """One revision and its worker, driven one JSON line at a time."""

    def __init__(self, name: str, tree: Path, label: str, scratch: Path, seed: int) -> None:
        """A worker importing `session_ledger` from `tree` (see `source_tree`), its
        symlinks in `scratch`, its string hashes seeded with `seed`."""
        self.name = name
        self.label = label
        self.tree = tree.resolve()
        imports = import_dir(tree, scratch / "imports")
        path = [str(imports), *filter(None, [os.environ.get("PYTHONPATH")])]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "bench.ab_worker"],
            cwd=ROOT,  # the worker's `bench` is this work tree's
            env={**os.environ, "PYTHONPATH": os.pathsep.join(path), "PYTHONHASHSEED": str(seed)},
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        self.imported_from: dict[str, str] = self._answer()["imported_from"]
        strays = {m: f for m, f in self.imported_from.items() if not self.holds(f)}
        if strays or f"{PACKAGE}.domain" not in self.imported_from:
            self.close()
            raise WorkerError(f"the {name} worker did not import {self.tree}: {strays}")

    @property
    def domain(self) -> str:
        """Where `session_ledger.domain` came from: the check a reader can see."""
        return self.imported_from[f"{PACKAGE}.domain"]

    def holds(self, file: str) -> bool:
        return Path(file).is_relative_to(self.tree)

    def request(self, op: str, **fields: Any) -> dict[str, Any]:
        self._pipe(self.process.stdin).write(json.dumps({"op": op, **fields}) + "\n")
        self._pipe(self.process.stdin).flush()
        return self._answer()

    def _answer(self) -> dict[str, Any]:
        line = self._pipe(self.process.stdout).readline()
        if not line:
            code = self.process.wait()
            raise WorkerError(f"the {self.name} worker ({self.label}) exited with code {code}")
        answer: dict[str, Any] = json.loads(line)
        if not answer.pop("ok"):
            raise WorkerError(f"the {self.name} worker ({self.label}): {answer['error']}")
        return answer

    @staticmethod
    def _pipe(pipe: IO[str] | None) -> IO[str]:
        assert pipe is not None  # both are PIPE
        return pipe

    def close(self) -> None:
        """Ask the worker to close its stores and stop; end it if it does not."""
        if self.process.poll() is None:
            try:
                self.request_quit()
                self.process.wait(timeout=60)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()

    def request_quit(self) -> None:
        stdin = self._pipe(self.process.stdin)
        stdin.write('{"op": "quit"}\n')
        stdin.close()
