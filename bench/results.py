"""The JSON record of a run: bench/results/<UTC time>-<kind>.json, and latest.json
(full runs) or latest-partial.json (quick or filtered runs, or runs without PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json
import os
import platform
import subprocess
import tempfile
import time
from importlib import metadata
from pathlib import Path
from typing import Any

_PACKAGES = (
    "session-audit-ledger",
    "eventsourcing",
    "psycopg",
    "llama-index-core",
    "llama-index-storage-chat-store-sqlite",
    "llama-index-storage-chat-store-postgres",
    "openai-agents",
    "sqlalchemy",
    "aiosqlite",
    "asyncpg",
    "tiktoken",
    "pydantic",
)


RESULTS = Path(__file__).parent / "results"


def _versions() -> dict[str, str | None]:
    out: dict[str, str | None] = {}
    for name in _PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def revision() -> str | None:
    """The commit measured, marked `+dirty` when the work tree had changes."""
    here = Path(__file__).parent
    try:
        commit = subprocess.run(
            ["git", "rev-parse", "--short", "HEAD"], cwd=here, capture_output=True, text=True
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=here, capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
    except OSError:
        return None
    return f"{commit}+dirty" if commit and dirty else commit or None


# Options that make a run other than the full one the README reports.
PARTIAL_FLAGS = ("--quick", "--only", "--workloads", "--no-postgres")


def write(
    out: Path,
    plan: Any,
    runner: Any,
    judged: list[dict[str, Any]],
    table: str,
    command: str,
    started: float,
    measured_revision: str | None,
) -> Path:
    record = {
        "command": command,
        "revision": measured_revision,
        "started_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started)),
        "seconds": round(time.time() - started, 1),
        "machine": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "system": platform.platform(),
        },
        "packages": _versions(),
        "plan": dataclasses.asdict(plan),
        "window_rows": runner.window_rows,
        "load_average_per_repetition": runner.load_averages,
        "cells": {
            store: {w: [c.as_dict() for c in reps] for w, reps in by_workload.items()}
            for store, by_workload in runner.cells.items()
        },
        "targets": judged,
        "table_markdown": table,
    }
    out.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(started))
    partial = any(flag in command for flag in PARTIAL_FLAGS)
    kind = "quick" if "--quick" in command else "partial" if partial else "full"
    path = out / f"{stamp}-{kind}.json"
    text = json.dumps(record, indent=1)
    path.write_text(text)
    # latest.json is the last full run (the README's table); a quick or filtered run
    # while developing must not replace it.
    (out / ("latest-partial.json" if partial else "latest.json")).write_text(text)
    return path


def write_diagnostic(name: str, fields: dict[str, Any], out: Path = RESULTS) -> Path:
    """A diagnostic's JSON (`out`/`name`, by default in bench/results/): when it ran, the
    revision of the work tree it ran from, and `fields`."""
    record = {"time": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "revision": revision()}
    out.mkdir(parents=True, exist_ok=True)
    path = out / name
    path.write_text(json.dumps({**record, **fields}, indent=1) + "\n")
    return path


def scratch_dir(prefix: str) -> Path:
    """A fresh directory for one run's databases, under the checkout's (ignored) var/."""
    var = Path("var")
    var.mkdir(exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=prefix, dir=var))
