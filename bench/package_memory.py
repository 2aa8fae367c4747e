"""Peak RSS of building a tenant's export package (the tar stream `GET /v1/package`
sends, and the RSMF file), at tenants of 10,000 and 100,000 messages: flat if the package
streams. SQLite, one process per measurement (a child that opens the store, notes its
peak RSS, then builds the package into /dev/null and notes it again).

    python -m bench.package_memory [--messages 10000 100000] [--per-session 1000]

Prints a table and writes bench/results/package-memory-latest.json. Not a test: the
figures depend on the machine; the stores are written first through the ledger's own
write path (not measured).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import platform
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from session_ledger.api.bootstrap import migrate, open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger

RESULTS = Path(__file__).parent / "results" / "package-memory-latest.json"
BATCH = 50  # messages per write while filling the store
TEXT = "a message of an ordinary length, as agents and their users write them " * 3


def _ledger(db: Path) -> Ledger:
    settings = Settings(database_url=f"sqlite:///{db}", tokenizer="whitespace",
                        default_tenant="bench")  # fmt: skip
    migrate(settings)
    return open_ledger(settings)


def _text(session: int, i: int) -> str:
    """Text that does not compress to nothing (the RSMF zip is deflated)."""
    return f"{i} {TEXT} {hashlib.sha256(f'{session}/{i}'.encode()).hexdigest()}"


def fill(db: Path, messages: int, per_session: int) -> None:
    ledger = _ledger(db)
    try:
        for s in range(max(1, messages // per_session)):
            for first in range(0, per_session, BATCH):
                batch = [{"role": "user" if i % 2 else "assistant", "content": _text(s, i)}
                         for i in range(first, min(first + BATCH, per_session))]  # fmt: skip
                ledger.put_messages(f"user-{s:05d}/chat", batch)
    finally:
        ledger.close()


def child(db: Path, format: str) -> None:
    """One measurement, printed as JSON: peak RSS before and after the package."""
    from session_ledger.projections.package import stream_package
    from session_ledger.projections.rsmf import write_rsmf

    ledger = _ledger(db)
    try:
        ledger.head("user-00000/chat")  # the store opened and read once, before measuring
        before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        started, size = time.perf_counter(), 0
        if format == "tar":
            with open("/dev/null", "wb") as sink:
                for chunk in stream_package(ledger, "bench", exported_by="bench"):
                    sink.write(chunk)
                    size += len(chunk)
        else:
            with tempfile.TemporaryDirectory() as tmp:
                out = Path(tmp) / "x.rsmf"
                write_rsmf(ledger, "bench", out, exported_by="bench")
                size = out.stat().st_size
        seconds = time.perf_counter() - started
        after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    finally:
        ledger.close()
    print(json.dumps({"rss_before_mb": round(before / 1024, 1),
                      "peak_rss_mb": round(after / 1024, 1), "bytes": size,
                      "seconds": round(seconds, 2)}))  # fmt: skip


def measure(db: Path, format: str) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-m", "bench.package_memory", "--child", str(db), format],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--per-session", type=int, default=1000)
    parser.add_argument("--child", nargs=2, metavar=("DB", "FORMAT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child[0]), args.child[1])
        return
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        for messages in args.messages:
            db = Path(tmp) / f"{messages}.db"
            fill(db, messages, args.per_session)
            for format in ("tar", "rsmf"):
                runs.append({"messages": messages, "sessions": max(1, messages // args.per_session),
                             "format": format, **measure(db, format)})  # fmt: skip
    result = {
        "at": datetime.now(UTC).isoformat(timespec="seconds"), "machine": platform.machine(),
        "python": platform.python_version(), "store": "sqlite", "runs": runs,
    }  # fmt: skip
    print(f"{'messages':>9} {'sessions':>8} {'format':>6} {'RSS open MB':>11} "
          f"{'peak MB':>8} {'output MB':>9} {'s':>6}")  # fmt: skip
    for r in runs:
        print(f"{r['messages']:>9,} {r['sessions']:>8,} {r['format']:>6} "
              f"{r['rss_before_mb']:>11} {r['peak_rss_mb']:>8} {r['bytes'] / 1e6:>9.1f} "
              f"{r['seconds']:>6}")  # fmt: skip
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"written to {RESULTS}")


if __name__ == "__main__":
    main()
