"""A compliance export, its offline verification, and a tampered copy caught.

    .venv/bin/python examples/compliance_export.py [DATABASE_URL]

Writes a short session, exports it with `session-ledger export` (every event with its
stored record and hash chain, JSONL), checks the file with `session-ledger
verify-export` (which needs only the file), then edits one message in a copy, as someone
covering their tracks would, and shows the verification name the broken line.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings

SESSION = "user-42/loan-advice"
CLI = Path(sys.executable).with_name("session-ledger")


def session_ledger(*args: str, database_url: str) -> subprocess.CompletedProcess[str]:
    """Run the `session-ledger` command on the store, as an operator would."""
    env = {**os.environ, "LEDGER_DATABASE_URL": database_url}
    return subprocess.run([CLI, *args], env=env, capture_output=True, text=True, check=False)


def main(url: str, folder: Path) -> None:
    ledger = open_ledger(Settings(database_url=url))
    try:
        ledger.put_messages(SESSION, [
            {"role": "user", "content": "Can I repay my loan early?"},
            {"role": "assistant", "content": "Yes, with a fee of 1% of the amount repaid."},
        ], actor="advisor-bot")  # fmt: skip
        ledger.put(SESSION, {"role": "user", "content": "Thanks."}, actor="advisor-bot")
        head = ledger.verify(SESSION).head  # keep this where the database's admins cannot write
    finally:
        ledger.close()

    export = folder / "loan-advice.jsonl"
    done = session_ledger("export", SESSION, "--output", str(export), database_url=url)
    print(f"session-ledger export: exit {done.returncode}, wrote {export.name}")
    lines = export.read_text(encoding="utf-8").splitlines()
    print(f"{len(lines)} lines: a header, {len(lines) - 2} events, a trailer")
    checked = session_ledger("verify-export", str(export), database_url=url)
    print(f"verify-export {export.name}: exit {checked.returncode}: {checked.stdout.strip()}")
    print(f"the store's chain head {head[:16]}... is in the file: {head in lines[-1]}")

    tampered = folder / "loan-advice-edited.jsonl"
    tampered.write_text(export.read_text(encoding="utf-8").replace("a fee of 1%", "no fee"),
                        encoding="utf-8")  # fmt: skip
    checked = session_ledger("verify-export", str(tampered), database_url=url)
    print(f"verify-export {tampered.name}: exit {checked.returncode}: {checked.stderr.strip()}")


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        main(sys.argv[1] if len(sys.argv) > 1 else f"sqlite:///{folder / 'ledger.db'}", folder)
