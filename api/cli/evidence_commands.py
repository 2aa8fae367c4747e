"""The `session-ledger` commands of evidence an auditor checks without trusting the
operator: make a signing key pair, sign checkpoints and check the store against them
(`verify --checkpoint`, an option of `verify` in store_commands.py that lands here), check exports
and packages (`verify-export`), write a tenant's package (`export` without a key lands
here), search events across sessions (`events`) and read the access log (`access-log`)."""

from __future__ import annotations

import getpass
import itertools
import json
import os
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from session_ledger.domain.errors import CheckpointError, InvalidInput
from session_ledger.domain.inputs import check_int
from session_ledger.domain.ports import ChainReport

from ..settings import Settings
from ..terminal import counted, echo, secho
from ..timers import make_checkpoints
from .common import (
    DatabaseUrl,
    Tenant,
    failing_cleanly,
    load_settings,
    moment_option,
    opened_ledger,
    tenant_option,
    tenant_or_default,
    valid_text,
)

app = typer.Typer()


@app.command("checkpoint-keys")
def checkpoint_keys(
    private: Annotated[Path, typer.Option(help="Write the private key here (PEM, mode 0600).")],
    public: Annotated[Path, typer.Option(help="Write the public key here (PEM).")],
) -> None:
    """Make an Ed25519 key pair for checkpoints: the private one for
    LEDGER_SIGNING_KEY_FILE, the public one for auditors."""
    from session_ledger.projections.checkpoint import generate_keys

    with failing_cleanly():
        _check_new_key_files(private, public)
        fingerprint = generate_keys(private, public)
    echo(f"key id {fingerprint}\nprivate key: {private}\npublic key: {public}")


def _check_new_key_files(private: Path, public: Path) -> None:
    """Refuse, before either file is written, a pair that would overwrite a key: the
    public key written over the private one just made (the same file twice, by any
    spelling or link), or either written over a file there already (a signing key lost
    for good). Both folders must be there, so that the private key is never left alone."""
    if private.resolve() == public.resolve():
        raise InvalidInput(f"--private {private} and --public {public} are the same file: "
                           "the public key would overwrite the private one")  # fmt: skip
    for path in (private, public):
        if os.path.lexists(path):
            raise InvalidInput(f"{path} exists: a key pair is written to new files only, "
                               "never over a file (a key) already there")  # fmt: skip
        if not path.parent.is_dir():
            raise InvalidInput(f"{path}: there is no folder {path.parent}")


@app.command()
def checkpoint(
    tenant: Annotated[
        str | None, tenant_option("One tenant (default: every tenant with a session).")
    ] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Sign a checkpoint of each tenant's session heads with LEDGER_SIGNING_KEY_FILE and
    write it under LEDGER_CHECKPOINT_DIR."""
    settings = load_settings(database_url)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        for path in make_checkpoints(settings, ledger, tenant):
            echo(str(path))


def verify_checkpoints(
    settings: Settings, files: list[Path], public_key_file: Path | None, tenant: str | None
) -> int:
    """`verify --checkpoint`: each checkpoint's signature and tree, growth between them,
    then every session of their tenant and its access log against them. Prints each
    finding; the number of problems found."""
    from session_ledger.projections.checkpoint import load_public_key, read_checkpoint
    from session_ledger.projections.checkpoint_verify import (
        check_checkpoint,
        check_growth,
        verify_access,
        verify_store,
    )

    if public_key_file is None:
        raise CheckpointError("verify --checkpoint needs --public-key FILE")
    public_key = load_public_key(public_key_file)
    loaded = sorted(((read_checkpoint(f), f) for f in files),
                    key=lambda pair: str(pair[0].tree_head["created_at"]))  # fmt: skip
    checkpoints = [cp for cp, _ in loaded]
    if tenant is not None and any(c.tenant != tenant for c in checkpoints):
        raise CheckpointError(f"a checkpoint given is not of tenant {tenant!r}")
    problems = 0
    for cp, file in loaded:
        for problem in check_checkpoint(cp, public_key):
            problems += 1
            echo(f"BROKEN  checkpoint {file}: {problem}")
    for earlier, later in itertools.pairwise(checkpoints):
        for problem in check_growth(earlier, later):
            problems += 1
            echo(f"BROKEN  checkpoints {earlier.hash[:16]} -> {later.hash[:16]}: {problem}")
    with opened_ledger(settings) as ledger:
        for report in verify_store(ledger, checkpoints):
            problems += _show(report)
        access = verify_access(ledger.views.evidence, checkpoints)
    for problem in access:
        echo(f"BROKEN  access log of {checkpoints[0].tenant!r}: {problem}")
    if not access:
        echo(f"ok      access log of {checkpoints[0].tenant!r}")
    return problems + len(access)


def _show(report: ChainReport) -> int:
    where = f"{report.tenant}/{report.key}"
    if report.intact:
        echo(f"ok      {where}  {counted(report.versions, 'event')}  head {report.head}")
        return 0
    echo(f"BROKEN  {where}  at version {report.first_bad_version}: {report.problem}")
    return 1


@app.command()
def events(
    actor: Annotated[str | None, typer.Option(help="The events of this actor (key:<id>).",
                                              callback=valid_text)] = None,
    type: Annotated[str | None, typer.Option(help="The events of this type.",
                                             callback=valid_text)] = None,
    start: Annotated[datetime | None, moment_option("--from", help="At or after (UTC).")] = None,
    end: Annotated[datetime | None, moment_option("--to", help="Before (UTC).")] = None,
    prefix: Annotated[str, typer.Option(help="Session keys starting so.",
                                        callback=valid_text)] = "",
    tenant: Tenant = None,
    limit: Annotated[int, typer.Option(help="At most this many events (at least 1; read "
                                       "1000 at a time).")] = 1000,
    database_url: DatabaseUrl = None,
) -> None:  # fmt: skip
    """Search the events of every session of a tenant by actor and/or type, in a time
    range, oldest first (the twin of GET /v1/events)."""
    settings = load_settings(database_url)
    tenant = tenant_or_default(tenant, settings)
    shown, cursor = 0, None
    with failing_cleanly():
        check_int("limit", limit, least=1)  # (a limit of 0 or less: nothing, unsaid)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        evidence = ledger.views.evidence
        while shown < limit:
            found, cursor = evidence.search_events(
                tenant, actor=actor, event_type=type, start=start, end=end,
                prefix=prefix, cursor=cursor, limit=min(1000, limit - shown),
            )  # fmt: skip
            for e in found:
                why = f"  reason: {e.reason}" if e.reason else ""
                echo(f"{e.recorded_at:%Y-%m-%d %H:%M:%S}  {e.key!r} v{e.version}  "
                     f"{e.event_type:<17} by {e.actor}{why}")  # fmt: skip
            shown += len(found)
            if cursor is None:
                break


def export_package(
    settings: Settings, tenant: str, output: Path | None, prefix: str,
    start: datetime | None, end: datetime | None, actor: str | None, access_log: bool = False,
) -> None:  # fmt: skip
    """`export --tenant T --output DIR|FILE.tar|FILE.rsmf`: the tenant-wide package, or
    its sessions as RSMF for review tools."""
    import tempfile

    from session_ledger.projections.package import package_files, tar_folder

    if output is None or os.path.lexists(output):  # (a link too: it is not followed)
        raise InvalidInput("a package is written to --output DIR, FILE.tar or FILE.rsmf, "
                           "not there yet")  # fmt: skip
    start, end = (m and (m if m.tzinfo else m.replace(tzinfo=UTC)) for m in (start, end))
    if start is not None and end is not None and start >= end:
        raise InvalidInput("--from must be before --to")  # (as GET /v1/package says it)
    if output.suffix == ".rsmf" and access_log:
        raise InvalidInput("--access-log applies only to a package of JSONL exports, not to "
                           "an RSMF file")  # fmt: skip
    if output.suffix == ".rsmf":
        from session_ledger.projections.rsmf import write_rsmf

        with opened_ledger(settings) as ledger:
            summary = write_rsmf(ledger, tenant, output, exported_by=f"cli:{getpass.getuser()}",
                                 prefix=prefix, start=start, end=end, actor=actor)  # fmt: skip
        echo(f"exported {counted(summary['conversations'], 'conversation')}, "
             f"{counted(summary['events'], 'RSMF event')} to {output}", err=True)  # fmt: skip
        return
    # Written beside the output and moved there whole: a failure leaves nothing half made.
    with opened_ledger(settings) as ledger, tempfile.TemporaryDirectory(dir=output.parent) as tmp:
        folder = Path(tmp) / "package"
        files = package_files(ledger, tenant, folder, exported_by=f"cli:{getpass.getuser()}",
                              prefix=prefix, start=start, end=end, actor=actor,
                              checkpoint_dir=settings.checkpoint_dir,
                              access_log=access_log)  # fmt: skip
        # On a terminal, the files written so far and the last one; elsewhere, nothing.
        with typer.progressbar(files, label="package", show_pos=True, file=sys.stderr,
                               item_show_func=lambda name: name) as written:  # fmt: skip
            for _ in written:
                pass
        manifest = json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
        if output.suffix == ".tar":
            tar_folder(folder, output)
        else:
            folder.rename(output)
    counts = manifest["counts"]
    echo(f"exported {counted(counts['sessions'], 'session')}, "
         f"{counted(counts['events'], 'event')} to {output}", err=True)  # fmt: skip


@app.command("access-log")
def access_log(
    tenant: Tenant = None,
    after: Annotated[int, typer.Option(help="Only entries after this number.")] = 0,
    limit: Annotated[int, typer.Option(help="At most this many entries (at least 1).")] = 1000,
    verify: Annotated[bool, typer.Option(help="Also recompute the log's hash chain.")] = False,
    database_url: DatabaseUrl = None,
) -> None:
    """Print who read or exported what: the tenant's access log, oldest first."""
    from session_ledger.projections.access_log import verify_access_log

    settings = load_settings(database_url)
    tenant = tenant_or_default(tenant, settings)
    with failing_cleanly():  # (else a limit of 0 prints nothing, one below 0 everything)
        check_int("after", after, least=0)
        check_int("limit", limit, least=1)
    with failing_cleanly(), opened_ledger(settings) as ledger:
        evidence = ledger.views.evidence
        for e in evidence.access_entries(tenant, after, limit):
            query = json.dumps(e.parameters, ensure_ascii=False)
            echo(f"{e.seq}  {e.recorded_at}  {e.actor}  {e.role}  {e.action}  "
                 f"{e.session_key!r}  {counted(e.records, 'record')}  {query}")  # fmt: skip
        problems = list(verify_access_log(evidence, tenant)) if verify else []
    for problem in problems:
        echo(f"BROKEN  access log of {tenant!r}: {problem}")
    if verify:
        echo("the access log's chain is " + ("broken" if problems else "intact"), err=True)
    if problems:
        raise typer.Exit(1)


@app.command("verify-export")
def verify_export(
    file: Annotated[str, typer.Argument(help="A JSONL export, or - for stdin.")],
    public_key: Annotated[
        Path | None,
        typer.Option(help="The checkpoints' Ed25519 public key (PEM): the export must carry "
                     "a checkpoint signed by it."),
    ] = None,
) -> None:  # fmt: skip
    """Check a JSONL export offline: exit 0 when intact, 1 naming the first broken line.
    An export that carries a checkpoint is proven to be in its signed tree."""
    from session_ledger.projections.export_verify import verify_export as verify

    key = None
    if public_key is not None:
        from session_ledger.projections.checkpoint import load_public_key

        with failing_cleanly():
            key = load_public_key(public_key)
    if file != "-" and (Path(file).is_dir() or file.endswith(".tar")):
        from session_ledger.projections.package import verify_package

        problems = verify_package(Path(file), key)
        for problem in problems:
            secho(f"BROKEN  {problem}", err=True, fg=typer.colors.RED)
        if problems:
            raise typer.Exit(1)
        echo(f"intact: the package {file}")
        return
    if file == "-":
        report = verify(typer.get_binary_stream("stdin"), key)
    else:
        try:
            with open(file, "rb") as lines:
                report = verify(lines, key)
        except OSError as exc:
            secho(f"error: {exc}", err=True, fg=typer.colors.RED)
            raise typer.Exit(2) from None
    if not report.ok:
        secho(report.summary(), err=True, fg=typer.colors.RED)
        raise typer.Exit(1)
    echo(report.summary())
