"""The command line refuses what it cannot do as asked, in one line (`error: ...`, exit
1; invalid settings: exit 2) and before it writes anything: an --output that is no
regular file, a port no socket has, a key pair over one file, a store that is no
database, a limit out of bounds, text that is not Unicode, options the export asked for
does not read, an empty tenant. A stored event that does not decode is named, not a
traceback; a reader of stdout that leaves ends the command quietly; counts read as
English and progress lines in a log do not run together."""

from __future__ import annotations

import os
import re
import socket
import sqlite3
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError
from typer.testing import CliRunner, Result

from session_ledger.api.cli import cli
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings

CLI = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]
NOT_UTF8 = "\udcff"  # what Python reads of the byte 0xff in an argument (surrogateescape)


def store(tmp_path: Path, puts: int = 3) -> dict[str, str]:
    """The environment of a SQLite store with one session, `k`, of `puts` messages."""
    settings = make_settings("sqlite", tmp_path)
    with make_ledger(settings) as ledger:
        for i in range(puts):
            ledger.put("k", {"role": "user", "content": f"hi {i}"})
    return {"LEDGER_DATABASE_URL": settings.database_url, "LEDGER_TOKENIZER": "whitespace",
            "LEDGER_DEFAULT_TENANT": settings.default_tenant}  # fmt: skip


def ledger_of(env: dict[str, str]) -> Ledger:
    """A ledger on the store of `env`, for writes the test makes itself."""
    return make_ledger(Settings(database_url=env["LEDGER_DATABASE_URL"], tokenizer="whitespace",
                                default_tenant=env["LEDGER_DEFAULT_TENANT"]))  # fmt: skip


def invoke(env: dict[str, str], *args: str) -> Result:
    return CliRunner().invoke(cli, list(args), env=env)


def refused(env: dict[str, str], *args: str, code: int = 1) -> str:
    """The one line a refused command printed (a refusal ends in SystemExit; an exception
    not caught would be the exception)."""
    result = invoke(env, *args)
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.output
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), result.stderr
    return lines[0]


def events_of(export: bytes) -> list[bytes]:
    """An export's event lines (its header and trailer say when it was made)."""
    lines = export.splitlines()
    assert b'"record":"header"' in lines[0] and b'"record":"trailer"' in lines[-1]
    return lines[1:-1]


def test_export_writes_a_regular_file_the_target_of_a_link_or_stdout(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # (where a file named - would be written)
    env = store(tmp_path)
    whole = invoke(env, "export", "k")
    assert whole.exit_code == 0, whole.output
    to_stdout = invoke(env, "export", "k", "--output", "-")
    assert events_of(to_stdout.stdout_bytes) == events_of(whole.stdout_bytes)

    target = tmp_path / "kept.jsonl"
    target.write_text("an older export")
    target.chmod(0o600)
    link = tmp_path / "link.jsonl"
    link.symlink_to(target)
    done = invoke(env, "export", "k", "--output", str(link))
    assert done.exit_code == 0, done.output
    assert link.is_symlink() and link.resolve() == target  # the link kept, its file written
    assert events_of(target.read_bytes()) == events_of(whole.stdout_bytes)
    assert stat.S_IMODE(target.stat().st_mode) == 0o600  # as private as the file it replaced
    assert not list(tmp_path.glob("*.partial"))


def test_export_refuses_an_output_that_is_no_regular_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)  # (where - and the empty path would be written)
    env = store(tmp_path)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    line = refused(env, "export", "k", "--output", str(fifo))
    assert line == f"error: --output {fifo} is a FIFO, not a regular file: name a file, or - " \
                   "for stdout"  # fmt: skip
    assert stat.S_ISFIFO(fifo.stat().st_mode)  # not replaced by a file
    assert "is a folder" in refused(env, "export", "k", "--output", str(tmp_path))
    assert "--output is empty" in refused(env, "export", "k", "--output", "")
    assert "--output is empty" in refused(env, "export", "--output", "")
    assert "not to stdout" in refused(env, "export", "--output", "-")  # a package
    assert not list(tmp_path.glob("*.partial"))


def test_serve_refuses_a_port_outside_1_to_65535_as_invalid_settings(tmp_path: Path) -> None:
    for port in (0, 65536, 99999):
        with pytest.raises(ValidationError, match="port"):
            Settings(port=port)
    assert Settings(port=65535).port == 65535
    # (a store that is no database: a port taken would fail at once, never serve)
    junk = tmp_path / "junk.db"
    junk.write_text("not a database")
    env = {"LEDGER_DATABASE_URL": f"sqlite:///{junk}"}
    line = refused({**env, "LEDGER_PORT": "99999"}, "serve", code=2)
    assert line.startswith("error: invalid settings: port:"), line
    assert "invalid settings: port:" in refused(env, "serve", "--port", "65536", code=2)
    mcp = invoke(env, "mcp", "--transport", "http", "--port", "70000")
    assert mcp.exit_code == 2 and "--port" in mcp.output, mcp.output


def test_checkpoint_keys_refuse_one_file_twice_and_a_file_there(tmp_path: Path) -> None:
    same = tmp_path / "same.pem"
    line = refused({}, "checkpoint-keys", "--private", str(same), "--public",
                   str(tmp_path / "sub" / ".." / "same.pem"))  # fmt: skip
    assert "are the same file" in line
    assert not same.exists()  # nothing written
    kept = tmp_path / "signing.pem"
    kept.write_text("the signing key in use")
    for args in (["--private", str(kept), "--public", str(tmp_path / "new.pem")],
                 ["--private", str(tmp_path / "new.pem"), "--public", str(kept)]):  # fmt: skip
        line = refused({}, "checkpoint-keys", *args)
        assert line.startswith(f"error: {kept} exists: "), line
    assert kept.read_text() == "the signing key in use"
    assert not (tmp_path / "new.pem").exists()
    done = invoke({}, "checkpoint-keys", "--private", str(tmp_path / "a.pem"), "--public",
                  str(tmp_path / "b.pem"))  # fmt: skip
    assert done.exit_code == 0, done.output


def test_a_store_that_cannot_be_used_is_named_in_one_line(tmp_path: Path) -> None:
    junk = tmp_path / "seed.py"
    junk.write_text("print('not a database')\n")
    env = {"LEDGER_DATABASE_URL": f"sqlite:///{junk}", "LEDGER_TOKENIZER": "whitespace"}
    for args in (["show", "k"], ["migrate"], ["keys", "list"], ["audit", "k"]):
        line = refused(env, *args)
        assert line == f"error: cannot use the store at sqlite:///{junk}: file is not a " \
                       "database", line  # fmt: skip
    folder = {"LEDGER_DATABASE_URL": f"sqlite:///{tmp_path}"}
    for args in (["migrate"], ["show", "k"]):
        assert "unable to open database file" in refused(folder, *args)


def test_an_unreachable_postgresql_is_named_at_once_by_every_command() -> None:
    """`keys list` waited out its pool (30 s, a warning a second) where `show` said at
    once that the store cannot be reached; both say it in one line now."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {"LEDGER_DATABASE_URL": f"postgresql://postgres@127.0.0.1:{port}/test"}
    for args in (["keys", "list"], ["show", "k"], ["keys", "revoke", "nope"]):
        line = refused(env, *args)
        assert line.startswith(f"error: cannot reach postgresql://postgres@127.0.0.1:{port}/test")
        assert "Connection refused" in line


def test_every_limit_is_bounded_as_audit_bounds_it(tmp_path: Path) -> None:
    env = store(tmp_path)
    for limit in ("0", "-1", "1001"):
        line = refused(env, "audit", "k", "--limit", limit)
        assert line == f"error: limit must be between 1 and 1000; got {limit}", line
    # no bound above for events and access-log: `access-log --limit 100000` reads a whole log
    for limit in ("0", "-1"):
        for args in (["events", "--type", "MessagesAppended"], ["access-log"]):
            line = refused(env, *args, "--limit", limit)
            assert line == f"error: limit must be a positive integer; got {limit}", line
    assert "after must be a non-negative integer" in refused(env, "access-log", "--after", "-1")
    found = invoke(env, "events", "--type", "MessagesAppended", "--limit", "2")
    assert found.exit_code == 0 and len(found.stdout.splitlines()) == 2, found.output
    assert invoke(env, "access-log", "--limit", "100000").exit_code == 0


@pytest.mark.parametrize(
    ("args", "name"),
    [
        (["keys", "create", "--name", NOT_UTF8], "name"),
        (["keys", "revoke", NOT_UTF8], "key_id"),
        (["keys", "list", "--tenant", NOT_UTF8], "tenant"),
        (["events", "--actor", NOT_UTF8], "actor"),
        (["events", "--type", NOT_UTF8], "type"),
        (["events", "--type", "x", "--prefix", NOT_UTF8], "prefix"),
        (["access-log", "--tenant", NOT_UTF8], "tenant"),
        (["export", "--actor", NOT_UTF8, "--output", "{tmp}/package"], "actor"),
    ],
)
def test_text_that_is_not_unicode_is_refused_by_name(
    tmp_path: Path, args: list[str], name: str
) -> None:
    env = store(tmp_path, puts=1)
    line = refused(env, *(arg.format(tmp=tmp_path) for arg in args))
    assert line == f"error: {name} contains a lone surrogate; it must be valid Unicode", line


def test_a_stored_event_that_does_not_decode_is_named(tmp_path: Path) -> None:
    env = store(tmp_path)
    with sqlite3.connect(tmp_path / "ledger.db") as db:
        db.execute("UPDATE ledger_events SET state = CAST('garbage' AS BLOB) "
                   "WHERE originator_version = 2")  # fmt: skip
    for args in (["audit", "k"], ["export", "k"], ["rebuild", "--check"],
                 ["rebuild", "--replace-broken-chains"],
                 ["export", "--output", str(tmp_path / "package.tar")]):  # fmt: skip
        result = invoke(env, *args)
        assert result.exit_code == 1 and isinstance(result.exception, SystemExit), result.output
        line = result.stderr.splitlines()[-1]  # (a package's label comes first)
        assert line.startswith("error: a stored event does not decode (Failed to deserialise"), line
        assert line.endswith("); run session-ledger verify"), line
    assert not list(tmp_path.glob("package.tar*"))


@pytest.mark.parametrize("command", [["export", "k"], ["audit", "k"]])
def test_a_reader_that_leaves_ends_the_command_quietly(tmp_path: Path, command: list[str]) -> None:
    env = store(tmp_path, puts=1)
    with ledger_of(env) as ledger:
        # Far more than a pipe holds: the command is still writing when the reader leaves.
        ledger.put_messages("k", [{"role": "user", "content": "word " * 20_000}] * 20)
    outside = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    process = subprocess.Popen([*CLI, *command], env={**outside, **env},
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)  # fmt: skip
    assert process.stdout is not None and process.stderr is not None
    assert len(process.stdout.read(80)) == 80
    process.stdout.close()
    errors = process.stderr.read().decode()
    assert process.wait(60) == 141 and errors == "", errors  # as SIGPIPE would end it


def test_export_refuses_options_it_would_not_read(tmp_path: Path) -> None:
    env = store(tmp_path)
    package = tmp_path / "package"
    line = refused(env, "export", "--format", "csv", "--as-of-version", "1", "--output",
                   str(package))  # fmt: skip
    assert line == "error: --format and --as-of-version apply only to one session's export " \
                   "(with KEY)"  # fmt: skip
    line = refused(env, "export", "k", "--prefix", "zzz", "--from", "2030-01-01", "--actor",
                   "nobody")  # fmt: skip
    assert line == "error: --prefix, --from and --actor apply only to a package (without KEY)"
    line = refused(env, "export", "k", "--to", "2030-01-01")
    assert line == "error: --to applies only to a package (without KEY)"
    line = refused(env, "export", "--from", "2030-01-01", "--to", "2020-01-01", "--output",
                   str(package))  # fmt: skip
    assert line == "error: --from must be before --to"
    assert "--access-log" in refused(env, "export", "--access-log", "--output",
                                     str(tmp_path / "review.rsmf"))  # fmt: skip
    assert not package.exists() and not (tmp_path / "review.rsmf").exists()


TAKE_A_TENANT = [
    ["keys", "create"], ["keys", "list"], ["show", "k"], ["audit", "k"], ["verify", "k"],
    ["export", "k"], ["events", "--type", "x"], ["access-log"], ["checkpoint"],
    ["erase", "k", "--reason", "r", "--basis", "b"],
]  # fmt: skip


@pytest.mark.parametrize("args", TAKE_A_TENANT)
def test_an_empty_tenant_is_refused_not_taken_for_the_default(
    tmp_path: Path, args: list[str]
) -> None:
    env = store(tmp_path, puts=1)
    keys = tmp_path / "keys"
    keys.mkdir()
    assert invoke({}, "checkpoint-keys", "--private", str(keys / "private.pem"), "--public",
                  str(keys / "public.pem")).exit_code == 0  # fmt: skip
    env["LEDGER_SIGNING_KEY_FILE"] = str(keys / "private.pem")
    env["LEDGER_CHECKPOINT_DIR"] = str(tmp_path / "checkpoints")
    line = refused(env, *args, "--tenant", "")
    assert line == "error: tenant must be a non-empty string", line
    assert not (tmp_path / "checkpoints").exists()


def test_counts_read_as_english_and_progress_lines_end_in_a_log(tmp_path: Path) -> None:
    env = store(tmp_path)
    verified = invoke(env, "verify")
    assert verified.exit_code == 0, verified.output
    assert "1 session checked, 0 broken" in verified.stderr
    rebuilt = invoke(env, "rebuild")  # stderr here is no terminal
    assert rebuilt.exit_code == 0, rebuilt.output
    assert "\r" not in rebuilt.stderr
    assert rebuilt.stderr.splitlines() == ["4 events replayed", "rebuilt the views from 4 events"]


def test_numbers_past_any_store_column_are_refused_in_one_line(tmp_path: Path) -> None:
    env = store(tmp_path)
    huge = "99999999999999999999"
    assert refused(env, "audit", "k", "--after", huge) == (
        f"error: after_version must be at most 2**62; got {huge}"
    )
    for option in ("--after", "--limit"):
        line = refused(env, "access-log", option, huge)
        assert line == f"error: {option[2:]} must be at most 2**62; got {huge}", line


@pytest.mark.parametrize(
    "args",
    [["show", "k", "--as-of"], ["export", "k", "--from"], ["events", "--type", "x", "--to"]],
)
@pytest.mark.parametrize("number", ["0", "1765058445.97", "-1"])
def test_a_time_given_as_a_number_is_refused_as_over_http(
    tmp_path: Path, args: list[str], number: str
) -> None:
    """Not read as seconds since 1970 (http-api.md, "Points in time")."""
    result = invoke(store(tmp_path), *args, number)
    assert result.exit_code == 2, result.output
    said = " ".join(re.sub(r"[│╭╮╰╯─]", " ", result.output).split())  # (unboxed, unwrapped)
    assert "a time is ISO 8601 (2026-11-24T10:00:00Z), not a number" in said, said


def test_a_time_in_iso_8601_is_taken_with_or_without_its_zone(tmp_path: Path) -> None:
    env = store(tmp_path)
    for moment in ("2999-01-01", "2999-01-01 10:00", "2999-01-01T10:00:00+01:00"):
        shown = invoke(env, "show", "k", "--as-of", moment)
        assert shown.exit_code == 0 and "[2] user: hi 2" in shown.stdout, shown.output
