"""The commands that start a store and serve it: `migrate` (the tables and the first
admin key) and `serve` (uvicorn, with the checkpoint and retention timers of timers.py)."""

from __future__ import annotations

import os
from contextlib import ExitStack
from typing import Annotated

import typer

from ..keystore import KeyStore
from ..settings import Settings
from .common import DatabaseUrl, failing_cleanly, key_store, load_settings

app = typer.Typer()


def migrate_store(settings: Settings, store: KeyStore) -> None:
    """Create the store's tables (the key table too); on an empty key table, the first
    admin key."""
    from ..bootstrap import migrate

    migrate(settings)
    secret = store.ensure_admin(settings.default_tenant, settings.bootstrap_key)
    if secret is not None and settings.bootstrap_key is None:
        typer.secho(
            f"Created the first admin API key of tenant {settings.default_tenant!r}. It is "
            f"shown this once; keep it:\n\n    {secret}\n", fg=typer.colors.YELLOW, bold=True,
        )  # fmt: skip
    elif secret is not None:
        typer.echo("Created the first admin API key from LEDGER_BOOTSTRAP_KEY.")


@app.command()
def migrate(
    database_url: DatabaseUrl = None,
    partitions: Annotated[
        int | None,
        typer.Option(
            help="Hash partitions per table, PostgreSQL (LEDGER_PARTITIONS).", show_default=False
        ),
    ] = None,
) -> None:
    """Create the store's tables (safe to run from many processes) and the first admin key."""
    settings = load_settings(database_url, partitions=partitions)
    with failing_cleanly(), key_store(settings) as store:
        migrate_store(settings, store)
    typer.echo("The store is ready.")


@app.command()
def serve(
    host: Annotated[str | None, typer.Option(help="Address to bind (LEDGER_HOST).")] = None,
    port: Annotated[int | None, typer.Option(help="Port to bind (LEDGER_PORT).")] = None,
    workers: Annotated[int | None, typer.Option(help="Processes (LEDGER_WORKERS).")] = None,
    database_url: DatabaseUrl = None,
) -> None:
    """Serve the HTTP API (uvicorn); migrates first unless LEDGER_MIGRATE_ON_START=false."""
    import uvicorn

    from ..app import create_app
    from ..bootstrap import check_durability, open_key_store, store_env
    from ..logs import log_config
    from ..metrics import shared_by_workers
    from ..timers import serve_timers

    settings = load_settings(database_url, host=host, port=port, workers=workers)
    in_memory = settings.database_url.startswith("memory://")
    if in_memory and settings.workers > 1:
        typer.secho("error: memory:// lives in one process; use one worker", err=True)
        raise typer.Exit(2)
    with failing_cleanly():
        store = open_key_store(settings.database_url, pool_size=settings.pool_size,
                               lock_timeout=settings.lock_timeout_seconds,
                               connect_wait=settings.store_wait_seconds)  # fmt: skip
        if settings.migrate_on_start or in_memory:
            migrate_store(settings, store)
        if not in_memory:  # said here, once, rather than as a traceback of each worker
            check_durability(settings, store_env(settings, create_tables=False))
    base = f"http://{settings.host}:{settings.port}"
    docs = "docs" if settings.docs else "openapi.json"
    typer.echo(
        f"session-ledger serves {base} (OpenAPI: {base}/{docs}).\n"
        "Authenticate with 'Authorization: Bearer <API key>': the admin key printed on first "
        "start (or LEDGER_BOOTSTRAP_KEY), or one made by `session-ledger keys create`."
    )
    with ExitStack() as timers:
        with failing_cleanly():
            timers.enter_context(serve_timers(settings))
        logging = log_config(settings.log_format) or uvicorn.config.LOGGING_CONFIG
        listen = {"host": settings.host, "port": settings.port,
                  "access_log": settings.access_log, "log_config": logging}  # fmt: skip
        if settings.workers == 1:
            uvicorn.run(create_app(settings, key_store=store, owns_process=True), **listen)
            return
        store.close()
        for name in ("host", "port", "workers"):
            os.environ[f"LEDGER_{name.upper()}"] = str(getattr(settings, name))
        with shared_by_workers():  # /metrics sums every worker's numbers
            uvicorn.run("session_ledger.api.app:app_from_env", factory=True,
                        workers=settings.workers, **listen)  # fmt: skip
