"""The commands read the `LEDGER_*` environment and never write it: run in a host's
process (as here), they leave its `os.environ` as they found it, whatever options they
were given."""

from __future__ import annotations

import os
from pathlib import Path

from typer.testing import CliRunner

from session_ledger.api.cli import cli


def test_commands_given_a_database_url_leave_the_environment_alone(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'ledger.db'}"
    before = dict(os.environ)
    for args in (["migrate"], ["keys", "list"], ["show", "nobody/here"]):
        result = CliRunner().invoke(cli, [*args, "--database-url", url])
        assert result.exit_code in (0, 1), result.output  # `show` of no session: 1
        assert dict(os.environ) == before, args
