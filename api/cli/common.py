"""What the `session-ledger` commands share: the options every command takes, the
settings read (options override `LEDGER_*`), the store opened, and refusals ended with a
message rather than a traceback."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

import typer
from pydantic import ValidationError

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.ledger import Ledger

from ..keystore import KeyNotFound, KeyStore
from ..settings import Settings
from ..terminal import secho

DatabaseUrl = Annotated[
    str | None, typer.Option(help="Store URL (default: LEDGER_DATABASE_URL).", show_default=False)
]
Tenant = Annotated[str | None, typer.Option(help="Tenant (default: LEDGER_DEFAULT_TENANT).")]


def load_settings(database_url: str | None = None, **overrides: Any) -> Settings:
    """The `LEDGER_*` settings with the command's options over them (None: not given);
    the environment is only read: `serve` hands its workers the settings themselves."""
    if database_url is not None:
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
    from ..bootstrap import open_key_store

    store = open_key_store(
        settings.database_url, pool_size=1, lock_timeout=settings.lock_timeout_seconds
    )
    try:
        yield store
    finally:
        store.close()


@contextmanager
def failing_cleanly() -> Iterator[None]:
    """Refusals, store problems and files that cannot be written or read end the command
    with a message, not a traceback."""
    try:
        yield
    except (LedgerError, KeyNotFound) as exc:
        secho(f"error: {exc}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None
    except OSError as exc:  # (an --output in a folder that is not there, a file not ours)
        where = f": {exc.filename}" if exc.filename else ""
        secho(f"error: {exc.strerror or exc}{where}", err=True, fg=typer.colors.RED)
        raise typer.Exit(1) from None


@contextmanager
def opened_ledger(settings: Settings) -> Iterator[Ledger]:
    from ..bootstrap import open_ledger

    # An operator's command on a mistyped store path says so instead of making a new one.
    ledger = open_ledger(settings, auto_migrate=False)
    try:
        yield ledger
    finally:
        ledger.close()
