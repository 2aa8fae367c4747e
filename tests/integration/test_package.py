"""The tenant-wide export package: the query selects whole sessions, the package is
checked offline (every file's digest, each session's chain and checkpoint proof, the
manifest's heads and counts), and one byte altered anywhere turns it red."""

from __future__ import annotations

import random
import tarfile
import time
from datetime import UTC, datetime
from pathlib import Path

from typer.testing import CliRunner

from session_ledger.api.cli import cli
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.checkpoint import (
    generate_keys,
    load_private_key,
    load_public_key,
    make_checkpoint,
)
from session_ledger.projections.package import verify_package, write_package
from session_ledger.projections.views import SQLViews


def test_a_package_selects_verifies_and_turns_red_at_any_byte(
    ledger: Ledger, tmp_path: Path
) -> None:
    generate_keys(tmp_path / "p.pem", tmp_path / "q.pem")
    for n in range(4):
        ledger.put(f"team/{n}", {"role": "user", "content": f"hello {n}"}, actor="key:alice")
    ledger.put("solo", {"role": "user", "content": "alone"}, actor="key:bob")
    time.sleep(0.002)  # (a moment strictly between the two groups of writes)
    middle = datetime.now(UTC)
    ledger.put("team/2", {"role": "assistant", "content": "later"}, actor="key:bob")
    assert isinstance(ledger.views, SQLViews)
    make_checkpoint(ledger.views, ledger.default_tenant, load_private_key(tmp_path / "p.pem"),
                    tmp_path / "cp")  # fmt: skip
    public = load_public_key(tmp_path / "q.pem")

    def package(name: str, **query: object) -> tuple[Path, list[str]]:
        manifest = write_package(ledger, ledger.default_tenant, tmp_path / name,
                                 exported_by="test", checkpoint_dir=tmp_path / "cp",
                                 **query)  # type: ignore[arg-type]  # fmt: skip
        return tmp_path / name, [s["key"] for s in manifest["sessions"]]

    everything, keys = package("all")
    assert keys == ["solo", "team/0", "team/1", "team/2", "team/3"]
    assert package("team", prefix="team/")[1] == ["team/0", "team/1", "team/2", "team/3"]
    assert package("bob", actor="key:bob")[1] == ["solo", "team/2"]
    assert package("later", start=middle)[1] == ["team/2"]
    assert package("earlier", end=middle)[1] == keys
    assert package("bob-later", actor="key:bob", start=middle)[1] == ["team/2"]
    # Year 1's first microsecond, the first moment a time can hold: nothing is before it.
    first = datetime.min.replace(tzinfo=UTC)
    assert package("from-the-first", start=first)[1] == keys
    assert package("to-the-first", end=first)[1] == []

    assert verify_package(everything, public) == []
    lines = (everything / "events.csv").read_text().splitlines()
    assert lines[0] == "key,version,type,recorded_at,actor,reason" and len(lines) == 1 + 11

    files = sorted(p for p in everything.rglob("*") if p.is_file())
    rng = random.Random(30)
    for _ in range(200):
        path = rng.choice(files)
        data = path.read_bytes()
        at = rng.randrange(len(data))
        path.write_bytes(data[:at] + bytes([data[at] ^ rng.randrange(1, 256)]) + data[at + 1 :])
        assert verify_package(everything, public), (path.name, at)
        path.write_bytes(data)
    (everything / "extra.txt").write_text("added")
    assert verify_package(everything) == ["extra.txt: in the package, not in the manifest"]


def test_the_cli_writes_a_tar_that_verify_export_checks(tmp_path: Path) -> None:
    generate_keys(tmp_path / "p.pem", tmp_path / "q.pem")
    env = {"LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'l.db'}",
           "LEDGER_TOKENIZER": "whitespace", "LEDGER_SIGNING_KEY_FILE": str(tmp_path / "p.pem"),
           "LEDGER_CHECKPOINT_DIR": str(tmp_path / "cp")}  # fmt: skip
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate"], env=env).exit_code == 0
    from session_ledger.api.bootstrap import open_ledger
    from session_ledger.api.settings import Settings

    ledger = open_ledger(Settings(database_url=env["LEDGER_DATABASE_URL"], tokenizer="whitespace"))
    try:
        for n in range(3):
            ledger.put(f"s{n}", {"role": "user", "content": "hi"})
    finally:
        ledger.close()
    assert runner.invoke(cli, ["checkpoint"], env=env).exit_code == 0
    args = ["export", "--tenant", "default", "--output", str(tmp_path / "p.tar")]
    done = runner.invoke(cli, args, env=env)
    assert done.exit_code == 0, done.output
    with tarfile.open(tmp_path / "p.tar") as tar:
        assert sorted(tar.getnames())[:3] == ["events.csv", "manifest.json", "manifest.sha256"]
    checked = runner.invoke(cli, ["verify-export", str(tmp_path / "p.tar"), "--public-key",
                                  str(tmp_path / "q.pem")], env=env)  # fmt: skip
    assert checked.exit_code == 0 and "intact: the package" in checked.stdout, checked.output
    data = (tmp_path / "p.tar").read_bytes()
    middle = len(data) // 2
    (tmp_path / "p.tar").write_bytes(data[:middle] + bytes([data[middle] ^ 1]) + data[middle + 1 :])
    assert runner.invoke(cli, ["verify-export", str(tmp_path / "p.tar")], env=env).exit_code == 1
