"""The commands that start a store and serve it: `migrate` (the tables and the first
admin key) and `serve` (uvicorn, with the checkpoint and retention timers of timers.py)."""

from __future__ import annotations

import os
import sys
from contextlib import ExitStack
from dataclasses import dataclass
from typing import TYPE_CHECKING, Annotated, Any

import typer

from ..keystore import KeyStore
from ..settings import Settings
from .common import DatabaseUrl, failing_cleanly, key_store, load_settings, using_store

if TYPE_CHECKING:
    from fastapi import FastAPI

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
    from ..http_protocol import BoundedHeadProtocol
    from ..logs import log_config
    from ..metrics import shared_by_workers
    from ..timers import serve_timers

    settings = load_settings(database_url, host=host, port=port, workers=workers)
    in_memory = settings.database_url.startswith("memory://")
    if in_memory and settings.workers > 1:
        typer.secho("error: memory:// lives in one process; use one worker", err=True)
        raise typer.Exit(2)
    with failing_cleanly(), using_store(settings.database_url):
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
        listen = {"host": settings.host, "port": settings.port, "http": BoundedHeadProtocol,
                  "access_log": settings.access_log, "log_config": logging}  # fmt: skip
        if settings.workers == 1:
            uvicorn.run(create_app(settings, key_store=store, owns_process=True), **listen)
            return
        store.close()
        with shared_by_workers() as metrics:  # /metrics sums every worker's numbers
            serve_workers(WorkerApp(settings, metrics), listen)


@dataclass(frozen=True)
class WorkerApp:
    """The app factory of `serve`'s worker processes, holding the settings `serve` was
    given (its options over the `LEDGER_*` variables) and the folder of the workers'
    metric files. uvicorn hands its configuration, this factory in it, to each worker
    process it spawns (pickled), so the settings reach the workers whole, and `serve`'s
    own environment is left as it was."""

    settings: Settings
    metrics: str

    def __call__(self) -> FastAPI:
        # prometheus_client takes its multiprocess mode from this variable, once, when it
        # is imported: set here, in the worker (a process of serve's own), before the app
        # imports the client.
        if "prometheus_client" in sys.modules:
            raise RuntimeError("prometheus_client was imported before its metrics folder was set")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = self.metrics
        from ..app import create_app

        return create_app(self.settings, owns_process=True)


def serve_workers(app: WorkerApp, listen: dict[str, Any]) -> None:
    """`app.settings.workers` uvicorn worker processes on one socket, each serving what
    `app` makes, until a signal stops them: the steps `uvicorn.run` takes for workers
    (which names the app by an import string only, leaving the workers the environment
    alone to read the settings from)."""
    import uvicorn
    from uvicorn.supervisors import Multiprocess

    config = uvicorn.Config(app, factory=True, workers=app.settings.workers, **listen)
    Multiprocess(config, sockets=[config.bind_socket()]).run()
