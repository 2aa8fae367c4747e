"""The command line prints stored text to a terminal: control characters and
bidirectional controls in it are shown as escapes, never obeyed; newlines and tabs stay;
`--json` stays valid JSON holding the text exactly."""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from session_ledger.api.bootstrap import open_key_store
from session_ledger.api.cli import cli
from tests.conftest import make_ledger, make_settings

# Set the window title, clear the screen, a C1 CSI, a right-to-left override, a carriage
# return that would overwrite the line.
HOSTILE = "\x1b]0;owned\x07\x1b[2J\x9b31m \u202eevil\u202c\rover\tand\nnext"
OBEYED = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def run(env: dict[str, str], *args: str) -> str:
    result = CliRunner().invoke(cli, list(args), env=env)
    assert result.exit_code == 0, result.output
    return result.stdout


def test_stored_text_is_shown_not_obeyed(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path)
    env = {"LEDGER_DATABASE_URL": settings.database_url, "LEDGER_TOKENIZER": "whitespace",
           "LEDGER_DEFAULT_TENANT": settings.default_tenant}  # fmt: skip
    with make_ledger(settings) as ledger:
        ledger.put("chat", {"role": "user", "content": HOSTILE}, reason="why\x1b[8m hidden")
    keys = open_key_store(settings.database_url)
    keys.migrate()
    keys.create(settings.default_tenant, "agent", name="bot \u202eexe.txt")
    keys.close()

    shown = run(env, "show", "chat")
    assert "\\x1b]0;owned\\x07\\x1b[2J\\x9b31m \\u202eevil\\u202c\\x0dover\tand\nnext" in shown
    audit = run(env, "audit", "chat")
    assert "reason: why\\x1b[8m hidden" in audit
    listed = run(env, "keys", "list")
    assert "bot \\u202eexe.txt" in listed
    as_json = run(env, "show", "chat", "--json")
    (message,) = json.loads(as_json)["messages"]
    assert message["blocks"][0]["text"] == HOSTILE
    for output in (shown, audit, listed, as_json):
        assert not OBEYED.search(output), repr(output)
