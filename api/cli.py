"""The `session-ledger` command: the command group, what its commands share (settings,
the store opened, refusals ended with a message), and the commands over a store's events:
`audit`, `rebuild`, `verify` and `export`. The others live beside it by what they do:
cli_serve.py (migrate, serve), cli_keys.py, cli_reads.py (show), cli_compliance.py (erase,
holds, retention) and cli_evidence.py (checkpoints, event search, access log, verify-export).

Every command reads the same `LEDGER_*` settings as the server; options override them.
Key and show commands work on the store directly (whoever runs them can read the
database anyway), so they need no API key.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import ChainReport

from .keystore import KeyNotFound, KeyStore, open_key_store
from .settings import Settings
from .terminal import echo, json_text, secho

cli = typer.Typer(name="session-ledger", no_args_is_help=True, add_completion=False,
                  help="Event-sourced conversation memory for LLM agents.")  # fmt: skip

DatabaseUrl = Annotated[
    str | None, typer.Option(help="Store URL (default: LEDGER_DATABASE_URL).", show_default=False)
]
Tenant = Annotated[str | None, typer.Option(help="Tenant (default: LEDGER_DEFAULT_TENANT).")]


def load_settings(database_url: str | None = None, **overrides: Any) -> Settings:
    if database_url is not None:
        # Exported too, so uvicorn's worker processes read the same store.
        os.environ["LEDGER_DATABASE_URL"] = database_url
        overrides["database_url"] = database_url
    try:
        return Settings(**{k: v for k, v in overrides.items() if v is not None})
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors()
        )
        secho(f"error: invalid settings: {problems}", err=True, fg=typer.colors.RED)
        raise typer.Exit(2) from None


@contextmanager
def key_store(settings: Settings) -> Iterator[KeyStore]:
    store = open_key_store(
        settings.database_url, pool_size=1, lock_timeout=settings.lock_timeout_seconds
    )
    try:
        yield store
    finally:
        store.close()


@contextmanager
def failing_cleanly() -> Iterator[None]:
    """Refusals and store problems end the command with a message, not a traceback."""
    try:
        yield
    except (LedgerError, KeyNotFound) as exc:
        secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None


@contextmanager
def opened_ledger(settings: Settings) -> Iterator[Ledger]:
    from .bootstrap import open_ledger

    # An operator's command on a mistyped store path says so instead of making a new one.
    ledger = open_ledger(settings, auto_migrate=False)
    try:
        yield ledger
    finally:
        ledger.close()


# Registered here so that `migrate` and `serve` come first in the help.
from . import cli_serve  # noqa: E402, F401


@cli.command()
def audit(
    key: str,
    tenant: Tenant = None,
    after: Annotated[int, typer.Option(help="Only events after this version.")] = 0,
    limit: Annotated[int, typer.Option(help="At most this many events.")] = 1000,
    database_url: DatabaseUrl = None,
) -> None:
    """Print a session's audit trail: every change, who made it, when and why."""
    settings = load_settings(database_url)
    tenant = tenant or settings.default_tenant
    with failing_cleanly(), opened_ledger(settings) as ledger:
        entries = ledger.audit(key, tenant=tenant, after_version=after, limit=limit)
    for e in entries:
        why = f"  reason: {e.reason}" if e.reason else ""
        echo(f"v{e.version}  {e.recorded_at:%Y-%m-%d %H:%M:%S}  {e.event_type:<17} "
             f"by {e.actor}{why}")  # fmt: skip
        echo(f"    {json_text(e.changes)[:500]}")


@cli.command()
def rebuild(
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Rebuild into scratch tables and print every view row that differs from "
            "what the events give; change nothing. Exits 1 when any row differs.",
        ),
    ] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Re-derive every view (transcript, sessions, timeline) from the event log."""
    from session_ledger.projections import rebuild as rebuilding
    from session_ledger.projections.views import SQLViews

    settings = load_settings(database_url)

    def progress(events: int) -> None:
        typer.echo(f"\r{events:,} events replayed", nl=False, err=True)

    with failing_cleanly(), opened_ledger(settings) as ledger:
        views = ledger.recorder
        assert isinstance(views, SQLViews)
        if not check:
            count = rebuilding.rebuild(views, ledger.mapper, ledger.tokenizer, progress=progress)
            echo(f"\nrebuilt the views from {count:,} events", err=True)
            return
        differences = rebuilding.check(views, ledger.mapper, ledger.tokenizer, progress=progress)
    echo("", err=True)
    for line in differences:
        echo(line)
    if differences:
        echo(f"{len(differences)} differences (at most 20 are listed)", err=True)
        raise typer.Exit(1)
    echo("the views match the events", err=True)


@cli.command()
def verify(
    key: Annotated[
        str | None, typer.Argument(help="One session; every session of every tenant if left out.")
    ] = None,
    tenant: Tenant = None,
    checkpoint: Annotated[
        list[Path] | None,
        typer.Option(
            help="A signed checkpoint (repeatable): also check its signature, that every "
            "session it lists is in the store and its chain passes through the head it "
            "recorded, and, given two or more, that every session only grew between them."
        ),
    ] = None,
    public_key: Annotated[
        Path | None, typer.Option(help="The checkpoints' Ed25519 public key (PEM).")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Recompute each session's hash chain from its stored events and compare it with the
    hashes kept as they were written. Prints each session's head; exits 1 at any break."""
    settings = load_settings(database_url)
    if checkpoint:
        from .cli_evidence import verify_checkpoints

        with failing_cleanly():
            problems = verify_checkpoints(settings, checkpoint, public_key, tenant)
        echo(f"{problems} problems found", err=True)
        if problems:
            raise typer.Exit(1)
        return
    broken = checked = 0
    with failing_cleanly(), opened_ledger(settings) as ledger:
        if key is not None:
            reports: Iterable[ChainReport] = [
                ledger.verify(key, tenant=tenant or settings.default_tenant)
            ]
        else:
            reports = ledger.verify_all()
        for report in reports:
            checked += 1
            where = f"{report.tenant}/{report.key}"
            if report.intact:
                echo(f"ok      {where}  {report.versions} events  head {report.head}")
            else:
                broken += 1
                echo(f"BROKEN  {where}  at version {report.first_bad_version}: "
                     f"{report.problem}")  # fmt: skip
    echo(f"{checked} sessions checked, {broken} broken", err=True)
    if broken:
        raise typer.Exit(1)


class ExportFormat(StrEnum):
    jsonl = "jsonl"
    csv = "csv"


@cli.command()
def export(
    key: Annotated[
        str | None, typer.Argument(help="One session; without it, a package of the tenant's.")
    ] = None,
    tenant: Tenant = None,
    format: Annotated[
        ExportFormat,
        typer.Option(
            "--format",
            help="jsonl: every event with its stored record and hash chain (verifiable); "
            "csv: the history, one row per message.",
        ),
    ] = ExportFormat.jsonl,
    as_of_version: Annotated[
        int | None, typer.Option(help="Export the session up to this version only.")
    ] = None,
    output: Annotated[
        Path | None,
        typer.Option("--output", "-o", help="Write to this file (default: stdout); a "
                     "package: to this folder, or FILE.tar."),
    ] = None,
    prefix: Annotated[str, typer.Option(help="Package: session keys starting so.")] = "",
    start: Annotated[datetime | None, typer.Option("--from", help="Package: sessions "
                                                   "changed at or after (UTC).")] = None,
    end: Annotated[datetime | None, typer.Option("--to", help="Package: ... before.")] = None,
    actor: Annotated[str | None, typer.Option(help="Package: sessions this actor "
                                              "changed (in the range).")] = None,
    access_log: Annotated[bool, typer.Option(help="JSONL: also the access log's entries "
                                             "about each session.")] = False,
    database_url: DatabaseUrl = None,
) -> None:  # fmt: skip
    """Export a session's transcript for compliance, streamed a page at a time; without
    KEY, a package of every session of the tenant the query selects (--output needed)."""
    from session_ledger.projections.export import export_session

    settings = load_settings(database_url)
    tenant = tenant or settings.default_tenant
    if key is None:
        from .cli_evidence import export_package

        with failing_cleanly():
            export_package(settings, tenant, output, prefix, start, end, actor, access_log)
        return
    with failing_cleanly(), opened_ledger(settings) as ledger:
        chunks = export_session(ledger, key, tenant=tenant, format=format.value,
                                as_of_version=as_of_version, access_log=access_log,
                                checkpoint_dir=settings.checkpoint_dir)  # fmt: skip
        if output is None:
            stdout = typer.get_binary_stream("stdout")
            for chunk in chunks:
                stdout.write(chunk)
            stdout.flush()
            return
        # Written aside and renamed when complete: FILE is never a partial export.
        partial = output.with_name(output.name + ".partial")
        try:
            with partial.open("wb") as out:
                for chunk in chunks:
                    out.write(chunk)
            partial.replace(output)
        finally:
            partial.unlink(missing_ok=True)
    echo(f"exported session {key!r} to {output}", err=True)


def main() -> None:
    """Entry point of the `session-ledger` script."""
    cli()


# The other command modules register their commands as they are imported, in the help's
# order: the compliance, key and read commands, then the evidence's.
from . import cli_compliance, cli_keys, cli_reads  # noqa: E402, F401

# isort: split
from . import cli_evidence  # noqa: E402, F401
