"""The compliance commands of `session-ledger`: erase a session, place or release a
legal hold, and apply the retention policy (`LEDGER_RETENTION`; its timer in `serve` is in
timers.py). They work on the store directly, as `show` and `audit` do, and name the
operator as the actor."""

from __future__ import annotations

import getpass
import sys
from datetime import UTC, datetime
from typing import Annotated

import typer

from session_ledger.domain.compliance import parse_retention
from session_ledger.domain.errors import InvalidInput

from ..terminal import counted, echo
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
retention_cli = typer.Typer(no_args_is_help=True, help="Apply the retention policy.")
hold_cli = typer.Typer(no_args_is_help=True, help="Place or release a legal hold (by reference).")

Reason = Annotated[str, typer.Option(help="Why (kept in the audit trail).")]
Reference = Annotated[str, typer.Option(help="The matter, case or ticket the hold is for.")]


def _operator() -> str:
    return f"cli:{getpass.getuser()}"


@app.command()
def erase(
    key: str,
    reason: Reason,
    basis: Annotated[str, typer.Option(help="The legal basis, e.g. 'GDPR art. 17'.")],
    tenant: Tenant = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Erase a session's content for good (its data key destroyed, its views dropped);
    its events, audit trail and hash chain stay. Needs a master key (LEDGER_MASTER_KEY)."""
    settings = load_settings(database_url)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        result = ledger.erase(key, reason=reason, basis=basis, actor=_operator(),
                              tenant=tenant_or_default(tenant, settings))  # fmt: skip
    echo(f"erased {key!r}: SessionErased is version {result.version}")


@app.command("encrypt-existing")
def encrypt_existing(database_url: DatabaseUrl = None) -> None:
    """Seal every session stored clear (started before LEDGER_MASTER_KEY was set) under
    a key of its own, one transaction per session, with a SessionEncrypted event each;
    stopped at any point and run again, it finishes. Then drops the old bytes (SQLite)."""
    settings = load_settings(database_url)
    sealed = 0
    with failing_cleanly(), opened_ledger(settings) as ledger:
        views = ledger.views
        if not views.can_seal():
            raise InvalidInput("encrypt-existing needs a master key: set LEDGER_MASTER_KEY")
        total = views.session_count()
        sessions = ledger.encrypt_all(actor=_operator())
        with typer.progressbar(sessions, length=total, label="sealing sessions",
                               file=sys.stderr, show_pos=True) as bar:  # fmt: skip
            for _, _, now in bar:
                sealed += now
        echo(f"sealed {counted(sealed, 'session')} stored clear; the other "
             f"{total - sealed} were sealed already or erased", err=True)  # fmt: skip
        echo(views.drop_old_bytes(), err=True)


@hold_cli.command("place")
def hold_place(
    key: str, reference: Reference, reason: Reason, tenant: Tenant = None,
    database_url: DatabaseUrl = None,
) -> None:  # fmt: skip
    """Put a session under a legal hold for one matter (beside any other): it cannot be
    erased until every hold is released."""
    settings = load_settings(database_url)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        result = ledger.place_hold(key, reference=reference, reason=reason, actor=_operator(),
                                   tenant=tenant_or_default(tenant, settings))  # fmt: skip
    echo(f"{key!r} is under legal hold {reference!r} from version {result.version}")


@hold_cli.command("release")
def hold_release(
    key: str, reference: Reference, reason: Reason, tenant: Tenant = None,
    database_url: DatabaseUrl = None,
) -> None:  # fmt: skip
    """Release the hold placed under this reference; the session's other holds stay."""
    settings = load_settings(database_url)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        result = ledger.release_hold(key, reference=reference, reason=reason,
                                     actor=_operator(),
                                     tenant=tenant_or_default(tenant, settings))  # fmt: skip
    echo(f"{key!r}: legal hold {reference!r} released at version {result.version}")


@retention_cli.command("apply")
def retention_apply(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="List, change nothing.")] = False,
    now: Annotated[
        datetime | None, moment_option(help="The time to apply the policy at (default: now).")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Erase each session whose last write is older than its LEDGER_RETENTION rule allows
    (the rule is the erasure's reason); sessions under legal hold are kept. Prints one
    line per session: erase (dry run), erased or held."""
    settings = load_settings(database_url)
    at = now or datetime.now(UTC)
    if at.tzinfo is None:  # a time given without a zone is UTC, as every stored time
        at = at.replace(tzinfo=UTC)
    with failing_cleanly():
        rules = parse_retention(settings.retention)
        if not rules:
            echo("no retention rules: set LEDGER_RETENTION", err=True)
            return
        with opened_ledger(settings) as ledger:
            count = 0
            for action in ledger.retention(rules, at, dry_run=dry_run):
                count += 1
                echo(f"{action.action:<6}  {action.tenant}/{action.key}  last write "
                     f"{action.last_write:%Y-%m-%d %H:%M:%S}  {action.reason}")  # fmt: skip
    echo(f"{counted(count, 'session')} past their retention{' (dry run)' if dry_run else ''}",
         err=True)  # fmt: skip
