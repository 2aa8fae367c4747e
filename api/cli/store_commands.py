"""The `session-ledger` commands over a store's events: `audit`, `rebuild`, `verify` and
`export` (`verify --checkpoint` and `export` without a key land in evidence_commands)."""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from datetime import datetime
from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import ChainReport

from ..terminal import counted, echo, json_text, progress, progress_done, secho
from .common import (
    DatabaseUrl,
    Tenant,
    failing_cleanly,
    load_settings,
    moment_option,
    opened_ledger,
    tenant_or_default,
    valid_text,
)
from .evidence_commands import export_package, verify_checkpoints

app = typer.Typer()


@app.command()
def audit(
    key: str,
    tenant: Tenant = None,
    after: Annotated[int, typer.Option(help="Only events after this version.")] = 0,
    limit: Annotated[int, typer.Option(help="At most this many events (1 to 1000).")] = 1000,
    database_url: DatabaseUrl = None,
) -> None:
    """Print a session's audit trail: every change, who made it, when and why."""
    settings = load_settings(database_url)
    tenant = tenant_or_default(tenant, settings)
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

    def replayed(events: int) -> None:
        progress(f"{counted(events, 'event')} replayed")

    with failing_cleanly(), opened_ledger(settings) as ledger:
        views = sql_views(ledger)
        if not check:
            broken = [] if replace_broken_chains else _broken_chains(ledger)
            if broken:
                for report in broken[:20]:
                    echo(f"BROKEN  {report.tenant}/{report.key}  at version "
                         f"{report.first_bad_version}: {report.problem}")  # fmt: skip
                secho(f"error: the events of {counted(len(broken), 'session')} no longer give "
                      "the hashes kept as they were written; a rebuild would replace them "
                      "with the events' own. Find out why (restore the events from a "
                      "backup), or pass --replace-broken-chains", err=True,
                      fg=typer.colors.RED)  # fmt: skip
                raise typer.Exit(1)
            count = rebuilding.rebuild(views, ledger.mapper, ledger.tokenizer, progress=replayed)
            progress_done()
            echo(f"rebuilt the views from {counted(count, 'event')}", err=True)
            return
        differences = rebuilding.check(views, ledger.mapper, ledger.tokenizer, progress=replayed)
    progress_done()
    for line in differences:
        echo(line)
    if differences:
        echo(f"{counted(len(differences), 'difference')} (at most 20 are listed)", err=True)
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
        echo(f"{counted(problems, 'problem')} found", err=True)
        if problems:
            raise typer.Exit(1)
        return
    broken = checked = 0
    with failing_cleanly(), opened_ledger(settings) as ledger:
        if key is not None:
            reports: Iterable[ChainReport] = [
                ledger.verify(key, tenant=tenant_or_default(tenant, settings))
            ]
        else:
            reports = ledger.verify_all()
        for report in reports:
            checked += 1
            where = f"{report.tenant}/{report.key}"
            if report.intact:
                echo(f"ok      {where}  {counted(report.versions, 'event')}  head {report.head}")
            else:
                broken += 1
                echo(f"BROKEN  {where}  at version {report.first_bad_version}: "
                     f"{report.problem}")  # fmt: skip
    echo(f"{counted(checked, 'session')} checked, {broken} broken", err=True)
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
        ExportFormat | None,
        typer.Option(
            "--format",
            help="jsonl (the default): every event with its stored record and hash chain "
            "(verifiable); csv: the history, one row per message.",
            show_default=False,
        ),
    ] = None,
    as_of_version: Annotated[
        int | None, typer.Option(help="Export the session up to this version only.")
    ] = None,
    output: Annotated[
        str | None,
        typer.Option("--output", "-o", help="Write to this file, whole or not at all (a "
                     "link: to the file it names), or - for stdout (the default); a "
                     "package: to this folder, or FILE.tar, or FILE.rsmf.",
                     show_default=False),
    ] = None,
    prefix: Annotated[str | None, typer.Option(help="Package: session keys starting so.",
                                               callback=valid_text)] = None,
    start: Annotated[datetime | None, moment_option("--from", help="Package: sessions "
                                                   "changed at or after (UTC).")] = None,
    end: Annotated[datetime | None, moment_option("--to", help="Package: ... before.")] = None,
    actor: Annotated[str | None, typer.Option(help="Package: sessions this actor "
                                              "changed (in the range).",
                                              callback=valid_text)] = None,
    access_log: Annotated[bool, typer.Option(help="JSONL: also the access log's entries "
                                             "about each session.")] = False,
    database_url: DatabaseUrl = None,
) -> None:  # fmt: skip
    """Export a session's transcript for compliance, streamed a page at a time; without
    KEY, a package of every session of the tenant the query selects (--output needed)."""
    from session_ledger.projections.export import export_session

    settings = load_settings(database_url)
    tenant = tenant_or_default(tenant, settings)
    if key is None:
        with failing_cleanly():
            _refuse_unread({"--format": format, "--as-of-version": as_of_version},
                           "one session's export (with KEY)")  # fmt: skip
            package = _package_path(output)
            export_package(settings, tenant, package, prefix or "", start, end, actor,
                           access_log)  # fmt: skip
        return
    with failing_cleanly():
        _refuse_unread({"--prefix": prefix, "--from": start, "--to": end, "--actor": actor},
                       "a package (without KEY)")  # fmt: skip
        target = _export_file(output)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        chunks = export_session(ledger, key, tenant=tenant,
                                format=(format or ExportFormat.jsonl).value,
                                as_of_version=as_of_version, access_log=access_log,
                                checkpoint_dir=settings.checkpoint_dir)  # fmt: skip
        if target is None:
            stdout = typer.get_binary_stream("stdout")
            for chunk in chunks:
                stdout.write(chunk)
            stdout.flush()
            return
        _write_whole(target, chunks)
    echo(f"exported session {key!r} to {output}", err=True)


STDOUT = "-"  # as `verify-export -` reads stdin


def _refuse_unread(given: dict[str, object], applies_to: str) -> None:
    """Options given that the export asked for does not read are refused by name rather
    than left out unsaid: an export without the selection asked for looks like one that
    found nothing to select."""
    names = [name for name, value in given.items() if value is not None]
    if names:
        listed = " and ".join([", ".join(names[:-1]), names[-1]] if names[1:] else names)
        verb = "apply" if names[1:] else "applies"
        raise InvalidInput(f"{listed} {verb} only to {applies_to}")


def _output_path(output: str) -> Path:
    """--output as a path whose folder is there; an empty one is refused (as a path it
    would name the working folder)."""
    if not output:
        raise InvalidInput(f"--output is empty: name a file, or {STDOUT} for stdout")
    path = Path(output)
    if not path.parent.is_dir():
        raise InvalidInput(f"--output {output}: there is no folder {path.parent}")
    return path


def _package_path(output: str | None) -> Path:
    """Where a package goes: a folder or a file, never stdout."""
    if output is None or output == STDOUT:
        raise InvalidInput("a package is written to --output DIR, FILE.tar or FILE.rsmf, "
                           "not to stdout")  # fmt: skip
    return _output_path(output)


def _export_file(output: str | None) -> Path | None:
    """The file a session's export replaces; None: stdout (no --output, or -). A link is
    followed: the export is written beside the file it names and renamed over that file,
    the link kept. A path that is there but no regular file (a folder, a device, a FIFO,
    /dev/stdout on a pipe) is refused before anything is written: renamed over, it would
    be replaced by a file."""
    if output is None or output == STDOUT:
        return None
    path = _output_path(output)
    kind = _kind_of(path)
    if kind is not None:
        raise InvalidInput(f"--output {output} is {kind}, not a regular file: name a file, "
                           f"or {STDOUT} for stdout")  # fmt: skip
    try:
        target = path.resolve()
    except RuntimeError as exc:  # a loop of links (Python 3.11; later ones raise OSError)
        raise InvalidInput(f"--output {output}: {exc}") from None
    if not target.parent.is_dir():
        raise InvalidInput(f"--output {output} links to {target}: there is no folder "
                           f"{target.parent}")  # fmt: skip
    return target


def _kind_of(path: Path) -> str | None:
    """What `path` names when it is there and is no regular file (links followed, as the
    system follows them: /dev/stdout is what the process's stdout is); None otherwise."""
    try:
        mode = path.stat().st_mode
    except (FileNotFoundError, NotADirectoryError):
        return None
    kinds = {stat.S_ISREG: None, stat.S_ISDIR: "a folder", stat.S_ISCHR: "a character "
             "device", stat.S_ISBLK: "a block device", stat.S_ISFIFO: "a FIFO",
             stat.S_ISSOCK: "a socket"}  # fmt: skip
    return next((kind for test, kind in kinds.items() if test(mode)), "a special file")


def _write_whole(target: Path, chunks: Iterable[bytes]) -> None:
    """`chunks` written beside `target` and renamed over it when complete: the file is
    never a partial export, and an export that fails leaves it as it was. The file
    replaced keeps its permissions (an export only its owner may read stays so)."""
    partial = target.with_name(target.name + ".partial")
    partial.unlink(missing_ok=True)  # (left by an export that was stopped)
    try:
        with partial.open("xb") as out:  # made new: never written through a link there
            for chunk in chunks:
                out.write(chunk)
        if target.exists():
            os.chmod(partial, stat.S_IMODE(target.stat().st_mode))
        partial.replace(target)
    finally:
        partial.unlink(missing_ok=True)
