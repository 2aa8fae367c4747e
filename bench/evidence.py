"""Evidence costs, on SQLite (one core, one process): `verify --checkpoint` throughput in
events/s over 100,000 events, and a signed checkpoint over 100,000 sessions: its time,
its file size, and the time to check it (signature and tree) with the public key.

    python -m bench.evidence [--events 100000] [--sessions 100000]

Prints a table and writes bench/results/evidence-latest.json. Not a test: the numbers
depend on the machine; the store is written through the ledger's own write path first
(not timed).
"""

from __future__ import annotations

import argparse
import json
import platform
import resource
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.checkpoint import (
    generate_keys,
    load_private_key,
    load_public_key,
    make_checkpoint,
    read_checkpoint,
)
from session_ledger.projections.checkpoint_verify import check_checkpoint, verify_store
from session_ledger.projections.views import SQLViews

RESULTS = Path(__file__).parent / "results" / "evidence-latest.json"
EVENTS_PER_SESSION = 10_000  # the verify store: sessions of this many events


def _ledger(folder: Path, tenant: str) -> Ledger:
    settings = Settings(database_url=f"sqlite:///{folder / 'ledger.db'}", tokenizer="whitespace",
                        default_tenant=tenant)  # fmt: skip
    migrate(settings)
    return open_ledger(settings)


def bench_verify(folder: Path, events: int, keys: Path) -> dict[str, Any]:
    ledger = _ledger(folder, "verify")
    try:
        sessions = max(1, events // EVENTS_PER_SESSION)
        for s in range(sessions):
            for i in range(events // sessions - 1):  # (+1: the session's first event)
                ledger.put(f"s{s}", {"role": "user", "content": f"message {i} of a session"})
        views = ledger.views
        assert isinstance(views, SQLViews)
        _, checkpoint = make_checkpoint(views, "verify", load_private_key(keys / "p.pem"),
                                        folder / "cp")  # fmt: skip
        started = time.process_time()
        reports = list(verify_store(ledger, [checkpoint]))
        cpu = time.process_time() - started
        checked = sum(r.versions for r in reports)
        assert all(r.intact for r in reports) and checked == sessions * (events // sessions)
        return {"events": checked, "sessions": sessions, "cpu_seconds": round(cpu, 3),
                "events_per_second": round(checked / cpu)}  # fmt: skip
    finally:
        ledger.close()


def bench_checkpoint(folder: Path, sessions: int, keys: Path) -> dict[str, Any]:
    ledger = _ledger(folder, "many")
    try:
        for s in range(sessions):
            ledger.put(f"session/{s:07d}", {"role": "user", "content": "hello"})
        views = ledger.views
        assert isinstance(views, SQLViews)
        started = time.perf_counter()
        path, _ = make_checkpoint(views, "many", load_private_key(keys / "p.pem"), folder / "cp")
        made = time.perf_counter() - started
        started = time.perf_counter()
        problems = check_checkpoint(read_checkpoint(path), load_public_key(keys / "q.pem"))
        checked = time.perf_counter() - started
        assert not problems, problems
        return {"sessions": sessions, "make_seconds": round(made, 3),
                "file_bytes": path.stat().st_size, "check_seconds": round(checked, 3)}  # fmt: skip
    finally:
        ledger.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=100_000)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        generate_keys(folder / "p.pem", folder / "q.pem")
        (folder / "v").mkdir()
        (folder / "c").mkdir()
        verify = bench_verify(folder / "v", args.events, folder)
        checkpoint = bench_checkpoint(folder / "c", args.sessions, folder)
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    result = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.machine(),
        "python": platform.python_version(), "store": "sqlite", "verify": verify,
        "checkpoint": checkpoint, "peak_rss_mb": round(peak_mb, 1),
    }  # fmt: skip
    print(f"{'measure':<44} {'value':>14}")
    for label, value in (
        (f"verify --checkpoint, {verify['events']:,} events: events/s (CPU)",
         f"{verify['events_per_second']:,}"),
        (f"checkpoint of {checkpoint['sessions']:,} sessions: seconds", checkpoint["make_seconds"]),
        ("  its file: bytes", f"{checkpoint['file_bytes']:,}"),
        ("  check with the public key: seconds", checkpoint["check_seconds"]),
        ("peak RSS of the process: MB", result["peak_rss_mb"]),
    ):  # fmt: skip
        print(f"{label:<44} {value:>14}")
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
