"""The tenant-wide export package: the query selects whole sessions, the package is
checked offline (every file's digest, each session's chain and checkpoint proof, the
manifest's heads and counts), and one byte altered anywhere turns it red."""

from __future__ import annotations

import copy
import io
import random
import tarfile
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from session_ledger.api.cli import cli
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.checkpoint import (
    generate_keys,
    load_private_key,
    load_public_key,
    make_checkpoint,
)
from session_ledger.projections.package import tar_folder, verify_package, write_package
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger


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


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w") as tar:
        for info, data in members:
            info = copy.copy(info)
            if data is not None:
                info.size = len(data)
            tar.addfile(info, None if data is None else io.BytesIO(data))
    return path


def _link(name: str, target: str, kind: bytes = tarfile.SYMTYPE) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = kind, target
    return info


def test_a_hostile_tar_is_broken_never_intact_nor_a_crash(ledger: Ledger, tmp_path: Path) -> None:
    """What an auditor might be handed: a name twice (a tampered copy before the true one,
    which a reader taking the first copy would see), a link where a file should be, a
    path outside the package, a file that is no tar, a tar cut short. Each is BROKEN with
    its reason, whatever the manifest says."""
    for n in range(2):
        ledger.put(f"s{n}", {"role": "user", "content": f"hello {n}"})
    write_package(ledger, ledger.default_tenant, tmp_path / "p", exported_by="test")
    good = tmp_path / "good.tar"
    tar_folder(tmp_path / "p", good)
    assert verify_package(good) == []
    with tarfile.open(good) as tar:
        members = [(m, tar.extractfile(m).read()) for m in tar.getmembers()]  # type: ignore[union-attr]
    session, data = next((m, d) for m, d in members if m.name == "sessions/000000.jsonl")
    tampered = data.replace(b"hello 0", b"HELLO 0")
    assert tampered != data

    def problems(name: str, items: list[tuple[tarfile.TarInfo, bytes | None]]) -> list[str]:
        return verify_package(_tar(tmp_path / f"{name}.tar", items))

    assert problems("twice", [(session, tampered), *members]) == [
        "sessions/000000.jsonl: 2 members of this name in the tar"
    ]
    symlink = _link("sessions/000000.jsonl", "/etc/passwd")
    assert problems("symlink", [*members, (symlink, None)])[:2] == [
        "sessions/000000.jsonl: 2 members of this name in the tar",
        "sessions/000000.jsonl: not a regular file (tar member type b'2')",
    ]
    hardlink = _link("manifest.json", "/etc/passwd", tarfile.LNKTYPE)
    rest = [(m, d) for m, d in members if m.name != "manifest.json"]
    assert problems("hardlink", [*rest, (hardlink, None)]) == [
        "manifest.json: not a regular file (tar member type b'1')",
        "no manifest.json in the package",
    ]
    escape = copy.copy(session)
    escape.name = "../../escaped.jsonl"
    assert problems("escape", [*members, (escape, data)]) == [
        "../../escaped.jsonl: a path outside the package",
        "../../escaped.jsonl: in the package, not in the manifest",
    ]
    (tmp_path / "noise.tar").write_bytes(random.Random(7).randbytes(5000))
    assert verify_package(tmp_path / "noise.tar") == [
        f"{tmp_path / 'noise.tar'}: not a tar file, or one cut short"
    ]
    whole = good.read_bytes()
    (tmp_path / "cut.tar").write_bytes(whole[: session.offset_data + session.size // 2])
    assert verify_package(tmp_path / "cut.tar")
    assert verify_package(tmp_path / "none.tar") == [
        f"{tmp_path / 'none.tar'}: no such file or folder"
    ]

    # A folder: a session's file swapped for a link to a copy is a link, not the file.
    folder = tmp_path / "p"
    (tmp_path / "copy.jsonl").write_bytes((folder / "sessions/000000.jsonl").read_bytes())
    (folder / "sessions/000000.jsonl").unlink()
    (folder / "sessions/000000.jsonl").symlink_to(tmp_path / "copy.jsonl")
    assert verify_package(folder)[:2] == [
        "sessions/000000.jsonl: a symbolic link, not a file",
        "sessions/000000.jsonl: in the manifest, not in the package",
    ]


def test_the_cli_names_an_output_it_cannot_write_and_a_package_it_cannot_read(
    tmp_path: Path,
) -> None:
    env = {
        "LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'l.db'}",
        "LEDGER_TOKENIZER": "whitespace",
    }
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate"], env=env).exit_code == 0
    missing = tmp_path / "no-such-folder"
    for args in (["export", "s", "--output", str(missing / "s.jsonl")],
                 ["export", "--output", str(missing / "p.tar")]):  # fmt: skip
        done = runner.invoke(cli, args, env=env)
        # (a refusal is SystemExit(1); an exception not caught would be the exception)
        assert done.exit_code == 1 and isinstance(done.exception, SystemExit), done.output
        assert f"there is no folder {missing}" in done.output
    assert not missing.exists()
    (tmp_path / "noise.tar").write_bytes(b"\0not a tar" * 100)
    done = runner.invoke(cli, ["verify-export", str(tmp_path / "noise.tar")], env=env)
    assert isinstance(done.exception, SystemExit) and done.exit_code == 1, done.output
    assert "not a tar file" in done.output


def test_a_package_that_fails_half_way_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The folder is written beside its place and moved there whole: a failure after
    some files (here, the disk filling) leaves nothing a reader could take for a
    package, and the same command runs again."""
    from session_ledger.projections import package

    env = {
        "LEDGER_DATABASE_URL": f"sqlite:///{tmp_path / 'l.db'}",
        "LEDGER_TOKENIZER": "whitespace",
    }
    runner = CliRunner()
    assert runner.invoke(cli, ["migrate"], env=env).exit_code == 0
    ledger = make_ledger(Settings(database_url=env["LEDGER_DATABASE_URL"], tokenizer="whitespace"))
    for key in ("a", "b", "c"):
        ledger.put(key, {"role": "user", "content": key})
    ledger.close()
    written = package.package_files

    def failing(*args: Any, **kwargs: Any) -> Iterator[str]:
        for n, name in enumerate(written(*args, **kwargs)):
            if n == 2:
                raise OSError(28, "No space left on device")
            yield name

    output = tmp_path / "pkg"
    monkeypatch.setattr(package, "package_files", failing)
    done = runner.invoke(cli, ["export", "--output", str(output)], env=env)
    assert done.exit_code == 1 and "No space left on device" in done.output, done.output
    assert not output.exists()
    assert [p.name for p in tmp_path.iterdir() if not p.name.startswith("l.db")] == []
    monkeypatch.setattr(package, "package_files", written)
    done = runner.invoke(cli, ["export", "--output", str(output)], env=env)
    assert done.exit_code == 0, done.output
    assert (output / "manifest.json").is_file()
