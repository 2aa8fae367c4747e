"""The README's Quick start shell lines and its LlamaIndex snippet run as printed: the
shell lines with `make serve` on a free port and a store of their own, their output
checked against the README's; the snippet in an empty folder."""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
FIRST_START_SECONDS = 300  # `make serve` installs first when pyproject.toml is newer


def section(title: str) -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"\n## {title}\n")
    return text[start : text.index("\n## ", start + 1)]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def clean_env(**extra: str) -> dict[str, str]:
    """This environment without the ledger's settings or an outer make's jobserver."""
    skip = ("LEDGER_", "MAKEFLAGS", "MFLAGS", "MAKELEVEL")
    return {**{k: v for k, v in os.environ.items() if not k.startswith(skip)}, **extra}


def test_quick_start_runs_as_printed(tmp_path: Path) -> None:
    quick_start = section("Quick start")
    (script,) = [b for b in re.findall(r"```sh\n(.*?)```", quick_start, re.S) if "until" in b]
    expected = re.search(r"prints[^\n]*\n\n```\n(.*?)```", quick_start, re.S)
    assert expected is not None, "the Quick start shows what it prints"
    port = free_port()
    env = clean_env(LEDGER_PORT=str(port), LEDGER_DATABASE_URL=f"sqlite:///{tmp_path / 'l.db'}")
    out = tmp_path / "printed.txt"
    with out.open("w") as printed:
        shell = subprocess.Popen(
            ["bash", "-c", script.replace("8080", str(port))], cwd=ROOT, env=env,
            stdout=printed, stderr=subprocess.STDOUT, start_new_session=True,
        )  # fmt: skip
        try:
            assert shell.wait(timeout=FIRST_START_SECONDS) == 0, out.read_text()
        finally:
            os.killpg(shell.pid, signal.SIGTERM)  # `make serve &` and the server under it
    answers = [line for line in out.read_text().splitlines() if line.startswith("{")]
    wanted = expected.group(1).splitlines()
    assert len(answers) == len(wanted), out.read_text()
    for answer, line in zip(answers, wanted, strict=True):
        pattern = ".*".join(map(re.escape, line.split("...")))
        assert re.fullmatch(pattern, answer), (answer, line)


def test_llamaindex_snippet_runs_as_printed(tmp_path: Path) -> None:
    (snippet, *_) = re.findall(r"```python\n(.*?)```", section("Use with LlamaIndex"), re.S)
    done = subprocess.run(
        [sys.executable, "-c", snippet], cwd=tmp_path, env=clean_env(), capture_output=True,
        text=True, timeout=240, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["Hello", "['Hello', 'Hello']"]
    assert (tmp_path / "var" / "ledger.db").exists()  # made on first use
