"""A store restored from a backup older than the newest checkpoint (docs/operations.md,
"What a restore means for the hash chain and the checkpoints"): the restored chains
verify, the checkpoint names every session rolled back or missing, writes taken after
the restore turn a rollback into a rewrite, and a new checkpoint chain started after the
old one is archived verifies clean."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

from typer.testing import CliRunner

from session_ledger.api.cli import cli
from session_ledger.api.settings import Settings
from session_ledger.projections.checkpoint import generate_keys, read_checkpoint
from tests.conftest import make_ledger, make_settings


def run(settings: Settings, *args: str, code: int = 0) -> str:
    env = {"LEDGER_DATABASE_URL": settings.database_url,
           "LEDGER_DEFAULT_TENANT": settings.default_tenant, "LEDGER_TOKENIZER": "whitespace",
           "LEDGER_SIGNING_KEY_FILE": str(settings.signing_key_file),
           "LEDGER_CHECKPOINT_DIR": str(settings.checkpoint_dir)}  # fmt: skip
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == code, result.output
    return result.stdout


def say(settings: Settings, key: str, times: int) -> None:
    ledger = make_ledger(settings)
    try:
        for i in range(times):
            ledger.put(key, {"role": "user", "content": f"{key} says {i}"})
    finally:
        ledger.close()


def test_a_restore_before_a_checkpoint_is_named_and_a_new_chain_starts_clean(
    tmp_path: Path,
) -> None:
    generate_keys(tmp_path / "signing.pem", tmp_path / "public.pem")
    live = make_settings("sqlite", tmp_path, signing_key_file=tmp_path / "signing.pem",
                         checkpoint_dir=tmp_path / "checkpoints")  # fmt: skip
    public = ["--public-key", str(tmp_path / "public.pem")]
    say(live, "a", 3)
    say(live, "b", 2)
    backup = tmp_path / "backup.db"
    source, copy = (
        sqlite3.connect(live.database_url.removeprefix("sqlite:///")),
        sqlite3.connect(backup),
    )
    try:
        source.backup(copy)  # what `sqlite3 ledger.db ".backup ..."` does
    finally:
        copy.close()
        source.close()
    say(live, "a", 2)  # a reaches version 6 (SessionStarted, then five puts)
    say(live, "c", 1)
    signed = Path(run(live, "checkpoint").strip())

    restored = live.model_copy(update={"database_url": f"sqlite:///{backup}"})
    assert "BROKEN" not in run(restored, "verify")  # every restored chain holds
    report = run(restored, "verify", "--checkpoint", str(signed), *public, code=1)
    broken = sorted(line for line in report.splitlines() if "BROKEN" in line)
    assert len(broken) == 2
    tenant = live.default_tenant
    assert broken[0].split()[1] == f"{tenant}/a"
    assert (
        "rolled back: the events end at version 4; the checkpoint recorded version 6" in (broken[0])
    )
    assert broken[1].split()[1] == f"{tenant}/c" and "missing from the store" in broken[1]

    # Writes taken after the restore reuse a's versions 5 and 6 with other contents.
    say(restored, "a", 2)
    report = run(restored, "verify", "--checkpoint", str(signed), *public, code=1)
    (line,) = [line for line in report.splitlines() if line.split()[1:2] == [f"{tenant}/a"]]
    assert "BROKEN" in line and "rewritten" in line and "rolled back" not in line

    # The procedure: archive the tenant's checkpoints, start a new chain from the restore.
    tenant_folder = signed.parent
    shutil.move(tenant_folder, tmp_path / "incident-archive")
    fresh = Path(run(restored, "checkpoint").strip())
    assert fresh.parent == tenant_folder and read_checkpoint(fresh).tree_head["previous"] is None
    report = run(restored, "verify", "--checkpoint", str(fresh), *public)
    assert "BROKEN" not in report
