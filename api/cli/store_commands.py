"""The `session-ledger` commands over a store's events: `audit`, `rebuild`, `verify` and
`export` (`verify --checkpoint` and `export` without a key land in evidence_commands)."""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import ChainReport

from ..terminal import echo, json_text, secho
from .common import DatabaseUrl, Tenant, failing_cleanly, load_settings, opened_ledger
from .evidence_commands import export_package, verify_checkpoints

app = typer.Typer()


@app.command()
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


def _broken_chains(ledger: Ledger) -> list[ChainReport]:
    """The sessions whose events disagree with a hash kept as it was written (not those
    whose views merely lack hashes: a rebuild derives them)."""
    return [r for r in ledger.verify_all() if not r.intact and not r.derivable]


@app.command()
def rebuild(
    check: Annotated[
        bool,
        typer.Option(
            "--check",
            help="Rebuild into scratch tables and print every view row that differs from "
            "what the events give; change nothing. Exits 1 when any row differs.",
        ),
    ] = False,
    replace_broken_chains: Annotated[
        bool,
        typer.Option(
            help="Rebuild even where the events no longer give the hashes kept as they "
            "were written (`verify` names them): those hashes, the evidence of the change, "
            "are replaced by the events' own.",
        ),
    ] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Re-derive every view (transcript, sessions, timeline) from the event log. Refused
    where the events no longer give the hashes kept as they were written, unless
    --replace-broken-chains: a rebuild would replace that evidence with their own."""
    from session_ledger.projections import rebuild as rebuilding

    from ..bootstrap import sql_views

    settings = load_settings(database_url)

    def progress(events: int) -> None:
        typer.echo(f"\r{events:,} events replayed", nl=False, err=True)

    with failing_cleanly(), opened_ledger(settings) as ledger:
        views = sql_views(ledger)
        if not check:
            broken = [] if replace_broken_chains else _broken_chains(ledger)
            if broken:
                for report in broken[:20]:
                    echo(f"BROKEN  {report.tenant}/{report.key}  at version "
                         f"{report.first_bad_version}: {report.problem}")  # fmt: skip
                secho(f"error: the events of {len(broken)} sessions no longer give the hashes "
                      "kept as they were written; a rebuild would replace them with the "
                      "events' own. Find out why (restore the events from a backup), or "
                      "pass --replace-broken-chains", err=True, fg=typer.colors.RED)  # fmt: skip
                raise typer.Exit(1)
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


@app.command()
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


@app.command()
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
    if output is not None and not output.parent.is_dir():
        secho(f"error: --output {output}: there is no folder {output.parent}", err=True,
              fg=typer.colors.RED)  # fmt: skip
        raise typer.Exit(1)
    if key is None:
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
