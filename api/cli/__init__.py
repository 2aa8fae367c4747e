"""The `session-ledger` command: one group made of the command modules beside it, each a
Typer app of its own that names nothing here (so nothing imports back):
serve_commands (migrate, serve), store_commands (audit, rebuild, verify, export),
compliance_commands (erase, encrypt-existing, and the `retention` and `hold` groups),
read_commands (show), evidence_commands (checkpoints, event search, access log,
verify-export), mcp_commands (mcp: the read tools over the Model Context Protocol) and
key_commands (the `keys` group); common.py holds what they share.

Every command reads the same `LEDGER_*` settings as the server; options override them.
Key and show commands work on the store directly (whoever runs them can read the
database anyway), so they need no API key.
"""

from __future__ import annotations

from typing import Any

import typer
from typer.core import TyperGroup

from . import (
    compliance_commands,
    evidence_commands,
    key_commands,
    mcp_commands,
    read_commands,
    serve_commands,
    store_commands,
)
from .common import stdout_closed


class Commands(TyperGroup):
    """The group of every command: whichever command runs, and wherever it prints (inside
    `failing_cleanly` or after it), a reader of stdout that left (`export KEY | head`)
    ends it quietly rather than with a message or a traceback."""

    def invoke(self, ctx: typer.Context) -> Any:
        try:
            return super().invoke(ctx)
        except BrokenPipeError:
            stdout_closed()


cli = typer.Typer(name="session-ledger", cls=Commands, no_args_is_help=True,
                  add_completion=False,
                  help="Event-sourced conversation memory for LLM agents.")  # fmt: skip
# Added without a name, a module's commands join the group's own, in this order (the
# help's); the named groups follow them.
for commands in (serve_commands, store_commands, compliance_commands, read_commands,
                 evidence_commands, mcp_commands):  # fmt: skip
    cli.add_typer(commands.app)
cli.add_typer(compliance_commands.retention_cli, name="retention")
cli.add_typer(compliance_commands.hold_cli, name="hold")
cli.add_typer(key_commands.keys_cli, name="keys")


def main() -> None:
    """Entry point of the `session-ledger` script."""
    cli()
