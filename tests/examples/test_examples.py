"""Every Python script in `examples/` runs as it is, with no network, and prints what it
says, on SQLite and PostgreSQL (the agent over HTTP on SQLite: it starts its own
server). The curl one runs against the e2e servers (tests/e2e/test_http_api_example.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import fresh_postgres_database

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
# llama-index's workflows read the agent's deprecated pydantic attributes: warnings only.
# A pool of 2 (not 8) per script: the test PostgreSQL server is shared by parallel runs.
ENV = {"PYTHONWARNINGS": "ignore::DeprecationWarning", "LEDGER_POOL_SIZE": "2"}


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def database_url(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'new' / 'ledger.db'}"  # not there yet: made on first use
        return
    with fresh_postgres_database("ledger_example") as url:
        yield url


def run(*args: str, env: dict[str, str] | None = None) -> str:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("LEDGER_")}
    done = subprocess.run(
        args, env={**clean, **ENV, **(env or {})}, capture_output=True, text=True, timeout=240,
        check=False,
    )  # fmt: skip
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{done.stdout}\n{done.stderr}"
    return done.stdout


TRANSCRIPT = """\
  [0] user      weather Zürich
  [1] assistant Looking up Zürich.  (calls weather)
  [2] tool      sunny, 21 °C
  [3] assistant It is sunny, 21 °C.
  [4] user      weather Oslo
  [5] assistant Looking up Oslo.  (calls weather)
  [6] tool      rain, 9 °C
  [7] assistant It is rain, 9 °C.
  [8] user      Which cities did I ask about?
  [9] assistant You asked about Zürich and Oslo.
"""


def test_agent_in_process(database_url: str) -> None:
    printed = run(sys.executable, str(EXAMPLES / "agent_in_process.py"), database_url)
    assert "> Which cities did I ask about?\nYou asked about Zürich and Oslo.\n" in printed
    assert TRANSCRIPT in printed
    assert "  v1 SessionStarted   by agent\n" in printed
    assert "  v7 MessagesAppended by agent, 1 added\n" in printed


def test_agent_over_http(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    printed = run(sys.executable, str(EXAMPLES / "agent_over_http.py"), url)
    assert TRANSCRIPT in printed
    assert "LedgerClient reads 10 messages; the last: You asked about Zürich and Oslo." in printed
    assert printed.count("MessagesAppended by key:") == 6


def test_replay(database_url: str) -> None:
    printed = run(sys.executable, str(EXAMPLES / "replay.py"), database_url)
    assert "session 'user-42/support' is at version 5" in printed
    at_version_3 = printed.split("The whole history at version 3:\n")[1].split("\n\n")[0]
    assert at_version_3.count("\n") == 4 and "Try a factory reset." in at_version_3
    window = printed.split("(a 25-token window):\n")[1].split("\n\n")[0]
    assert window.splitlines() == ["  user: That did not help.",
                                   "  assistant: Update the firmware to 2.4.1."]  # fmt: skip
    at_time = printed.split("The history at ")[1].split("\n\n")[0].splitlines()[1:]
    assert len(at_time) == 3 and at_time[-1] == "  assistant: Try a factory reset."
    assert "  -assistant: Try a factory reset.\n" in printed
    assert "  +system: Summary: Wi-Fi drops; firmware 2.4.1 suggested.\n" in printed
    assert "  v4 MessageRemoved   by reviewer: advice wiped user settings\n" in printed


def test_compliance_export(database_url: str) -> None:
    printed = run(sys.executable, str(EXAMPLES / "compliance_export.py"), database_url)
    assert "5 lines: a header, 3 events, a trailer" in printed
    assert "verify-export loan-advice.jsonl: exit 0: intact: session 'user-42/loan-advice'" in (
        printed
    )
    assert "is in the file: True" in printed
    assert "verify-export loan-advice-edited.jsonl: exit 1: broken at line 3: " in printed


def test_adk_agent(database_url: str) -> None:
    printed = run(sys.executable, str(EXAMPLES / "adk_agent.py"), database_url)
    assert "> Which cities did I ask about?\nYou asked about Zürich and Oslo.\n" in printed
    assert "The session as ADK reads it back: 10 events\n" in printed
    assert "  forecaster Looking up Oslo. | calls weather(Oslo)\n" in printed
    assert "state: {'user:cities': ['Zürich', 'Oslo']}\n" in printed
    assert "  v12 MessagesAppended by weather-bot\n" in printed
    assert "After delete_session ADK finds None; the audit trail ends with\n  HistoryCleared\n" in (
        printed
    )
    assert "the ledger replays version 12: 11 messages" in printed
    assert "hash chain of 13 events: intact" in printed
