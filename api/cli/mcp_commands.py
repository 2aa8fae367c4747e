"""`session-ledger mcp`: the ledger's read tools over the Model Context Protocol
(api/mcp_server/), on stdio for a client that starts it, or over streamable HTTP."""

from __future__ import annotations

import os
from enum import StrEnum
from typing import Annotated

import typer

from .common import DatabaseUrl, failing_cleanly, key_store, load_settings, opened_ledger

app = typer.Typer()
KEY_VARIABLE = "LEDGER_API_KEY"  # the stdio server's caller: an API key, as over HTTP


class Transport(StrEnum):
    stdio = "stdio"
    http = "http"


@app.command()
def mcp(
    transport: Annotated[Transport, typer.Option(help="stdio: one client, the process that "
                         "starts it; http: streamable HTTP at /mcp.")] = Transport.stdio,
    api_key: Annotated[str | None, typer.Option(help=f"stdio: the caller's API key (default: "
                       f"{KEY_VARIABLE}); over HTTP each request sends its own.",
                       show_default=False)] = None,
    host: Annotated[str, typer.Option(help="http: the address to bind.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="http: the port to bind.", min=1, max=65535)] = 8765,
    database_url: DatabaseUrl = None,
) -> None:  # fmt: skip
    """Serve the read tools over MCP (window, history, head, replay, audit trail and
    search), for the API keys and roles of the HTTP API, every read in the access log."""
    try:
        from session_ledger.api.mcp_server.server import build_server, run
    except ImportError:
        typer.secho("error: the MCP server needs the mcp extra: "
                    "pip install 'session-audit-ledger[mcp]'", err=True)  # fmt: skip
        raise typer.Exit(2) from None
    secret = api_key or os.environ.get(KEY_VARIABLE)
    if transport is Transport.stdio and not secret:
        typer.secho(f"error: give the caller's API key: --api-key or {KEY_VARIABLE}", err=True)
        raise typer.Exit(2)
    settings = load_settings(database_url)
    with failing_cleanly(), opened_ledger(settings) as ledger, key_store(settings) as keys:
        server = build_server(
            ledger, keys, log_agent_reads=settings.log_agent_reads,
            api_key=secret if transport is Transport.stdio else None,
            url=f"http://{host}:{port}",
        )  # fmt: skip
        run(server, transport.value, host, port)
