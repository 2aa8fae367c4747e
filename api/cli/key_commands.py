"""`session-ledger keys`: create, list and revoke API keys (on the store directly)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..keystore import ROLES
from ..terminal import echo
from .common import (
    DatabaseUrl,
    Tenant,
    failing_cleanly,
    key_store,
    load_settings,
    tenant_option,
    tenant_or_default,
    valid_text,
)

keys_cli = typer.Typer(no_args_is_help=True, help="Create, list and revoke API keys.")


@keys_cli.command("create")
def keys_create(
    role: Annotated[str, typer.Option(help=f"One of: {', '.join(ROLES)}.")] = "agent",
    tenant: Tenant = None,
    name: Annotated[str, typer.Option(help="A label for people.", callback=valid_text)] = "",
    database_url: DatabaseUrl = None,
) -> None:
    """Create an API key and print its secret (shown this once)."""
    settings = load_settings(database_url)
    with failing_cleanly(), key_store(settings) as store:
        record, secret = store.create(tenant_or_default(tenant, settings), role, name)
    echo(f"id: {record.id}\ntenant: {record.tenant}\nrole: {record.role}\nkey: {secret}")


@keys_cli.command("list")
def keys_list(
    tenant: Annotated[
        str | None, tenant_option("Only this tenant's keys (default: every tenant's).")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """List API keys (all tenants unless --tenant), revoked ones marked."""
    settings = load_settings(database_url)
    with failing_cleanly(), key_store(settings) as store:
        records = store.list(tenant)
    for r in records:
        state = f"revoked {r.revoked_at:%Y-%m-%d %H:%M}" if r.revoked_at else "active"
        echo(f"{r.id}  {r.tenant}  {r.role:<7}  {state:<24}  {r.name}")


@keys_cli.command("revoke")
def keys_revoke(
    key_id: Annotated[str, typer.Argument(callback=valid_text)],
    database_url: DatabaseUrl = None,
) -> None:
    """Revoke an API key by its id: it stops working at once."""
    settings = load_settings(database_url)
    with failing_cleanly(), key_store(settings) as store:
        store.revoke(key_id)
    echo(f"revoked {key_id}")
