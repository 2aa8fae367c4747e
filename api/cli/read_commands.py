"""`session-ledger show`: a session's history, now or as it was."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

import typer

from ..terminal import echo, json_text
from .common import (
    DatabaseUrl,
    Tenant,
    failing_cleanly,
    load_settings,
    moment_option,
    opened_ledger,
    tenant_or_default,
)

app = typer.Typer()


@app.command()
def show(
    key: str,
    tenant: Tenant = None,
    as_of_version: Annotated[
        int | None, typer.Option(help="Show the session as it was at this version.")
    ] = None,
    as_of: Annotated[
        datetime | None, moment_option(help="Show it as it was at this time (UTC).")
    ] = None,
    archived: Annotated[bool, typer.Option(help="Show the archived messages.")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON document.")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Print a session: its version and counts, then its messages, oldest first."""
    settings = load_settings(database_url)
    tenant = tenant_or_default(tenant, settings)
    status = "archived" if archived else "active"
    with failing_cleanly(), opened_ledger(settings) as ledger:
        head = ledger.head(key, tenant=tenant)
        messages = ledger.get_all(
            key, tenant=tenant, status=status, as_of_version=as_of_version, as_of=as_of
        )
    point = f" as of version {as_of_version}" if as_of_version else ""
    point += f" as of {as_of.isoformat()}" if as_of else ""
    if as_json:
        document = {"key": key, "tenant": tenant, "version": head.version,
                    "as_of_version": as_of_version, "as_of": as_of and as_of.isoformat(),
                    "messages": [m.to_dict() for m in messages]}  # fmt: skip
        typer.echo(json_text(document, indent=2))  # escaped as JSON, not as text
        return
    echo(f"session {key!r} (tenant {tenant!r}){point}: now at version {head.version}, "
         f"{head.message_count} active, {head.archived_count} archived, "
         f"updated {head.updated_at:%Y-%m-%d %H:%M:%S} UTC")  # fmt: skip
    for index, message in enumerate(messages):
        echo(f"[{index}] {message.role}: {message.content}")
