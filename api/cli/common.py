"""What the `session-ledger` commands share: the options every command takes, the
settings read (options override `LEDGER_*`), the store opened, and refusals ended with a
message rather than a traceback."""

from __future__ import annotations

import os
import sqlite3
import sys
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from datetime import datetime
from typing import Annotated, Any, NoReturn

import psycopg
import typer
from eventsourcing.persistence import MapperDeserialisationError, PersistenceError
from psycopg_pool import PoolTimeout
from pydantic import TypeAdapter, ValidationError

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.inputs import check_tenant, check_text
from session_ledger.domain.ledger import Ledger

from ..deps import InRange
from ..keystore import KeyNotFound, KeyStore
from ..settings import Settings
from ..terminal import secho

# What a store that cannot be used raises, from its driver or from the eventsourcing
# library's recorders: a file that is no SQLite database, a folder named as one, a
# PostgreSQL server that refuses the connection.
STORE_ERRORS = (sqlite3.Error, psycopg.Error, PoolTimeout, PersistenceError)


class StoreFault(Exception):
    """The store of the settings could not be used; the message names it."""


def tenant_option(help: str) -> Any:
    """A --tenant option, checked as it is read (`_given_tenant`)."""
    return typer.Option(help=help, callback=_given_tenant)


def _given_tenant(tenant: str | None) -> str | None:
    """--tenant as given. An empty one is refused rather than taken for one left out (the
    default tenant, or every tenant), and one no store holds (a lone surrogate, a control
    character) is said so before any store is opened."""
    if tenant is not None:
        with failing_cleanly():
            check_tenant(tenant)
    return tenant


def valid_text(param: typer.CallbackParam, value: str | None) -> str | None:
    """The callback of a text option the store is asked about: one that is not valid
    Unicode (bytes that are not UTF-8 on the command line, which Python reads as lone
    surrogates) is refused by name, as the ledger refuses a key or a reason, rather than
    failing where it is first encoded."""
    if value is not None:
        with failing_cleanly():
            check_text(value, param.name or "the value", sys.maxsize, allow_empty=True,
                       allow_controls=True)  # fmt: skip
    return value


DatabaseUrl = Annotated[
    str | None, typer.Option(help="Store URL (default: LEDGER_DATABASE_URL).", show_default=False)
]
Tenant = Annotated[str | None, tenant_option("Tenant (default: LEDGER_DEFAULT_TENANT).")]


_MOMENT: TypeAdapter[datetime] = TypeAdapter(Annotated[datetime, InRange])


def moment(text: str) -> datetime:
    """A time given on the command line, read as the HTTP API reads one (`deps.iso_moment`):
    ISO 8601 (no zone: UTC; a date alone: its midnight); a number is refused, not read as
    seconds since 1970."""
    try:
        return _MOMENT.validate_python(text)
    except ValidationError as e:
        raise typer.BadParameter(e.errors()[0]["msg"].removeprefix("Value error, ")) from None


def moment_option(*names: str, help: str) -> Any:
    """An option that takes a time (`moment`)."""
    return typer.Option(*names, help=help, parser=moment, metavar="ISO-8601")


def tenant_or_default(tenant: str | None, settings: Settings) -> str:
    """The tenant a command works on: --tenant, else LEDGER_DEFAULT_TENANT."""
    return settings.default_tenant if tenant is None else tenant


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
def using_store(database_url: str) -> Iterator[None]:
    """A driver's or the library's error met while the block uses the store, raised again
    as a StoreFault naming the store (its URL without the password), for
    `failing_cleanly` to say in one line."""
    try:
        yield
    except STORE_ERRORS as exc:
        from ..bootstrap import redact

        raise StoreFault(
            f"cannot use the store at {redact(database_url)}: {one_line(str(exc))}"
        ) from exc


@contextmanager
def key_store(settings: Settings) -> Iterator[KeyStore]:
    from ..bootstrap import open_key_store, reached

    with using_store(settings.database_url):
        if settings.database_url.startswith(("postgresql://", "postgres://")):
            with reached(settings.database_url, settings.store_wait_seconds):
                pass  # (an unreachable store is said at once, not after the pool's wait)
        store = open_key_store(
            settings.database_url,
            pool_size=1,
            lock_timeout=settings.lock_timeout_seconds,
            connect_wait=settings.store_wait_seconds,
        )
        try:
            yield store
        finally:
            store.close()


@contextmanager
def failing_cleanly() -> Iterator[None]:
    """Refusals, store problems and files that cannot be written or read end the command
    with a message, not a traceback. A reader of stdout that left is no problem of the
    command's: the command group ends it quietly (`stdout_closed`)."""
    try:
        yield
    except (LedgerError, KeyNotFound, StoreFault) as exc:
        fail(one_line(str(exc)))
    except MapperDeserialisationError as exc:  # (bytes changed: `verify` names the session)
        fail(f"a stored event does not decode ({one_line(str(exc))}); "
             "run session-ledger verify")  # fmt: skip
    except STORE_ERRORS as exc:  # (met outside `opened_ledger` and `key_store`)
        fail(f"the store failed: {one_line(str(exc))}")
    except BrokenPipeError:
        raise
    except OSError as exc:  # (an --output in a folder that is not there, a file not ours)
        where = f": {exc.filename}" if exc.filename else ""
        fail(f"{exc.strerror or exc}{where}")


def fail(message: str) -> NoReturn:
    """End the command with `error: message` on stderr and status 1."""
    secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(1) from None


def one_line(text: str) -> str:
    """`text` on one line: a driver's message may run over several (PostgreSQL's hints)."""
    return " ".join(line.strip() for line in text.splitlines() if line.strip())


def stdout_closed() -> NoReturn:
    """The reader of stdout left (`export KEY | head`): the command ends as one that
    SIGPIPE stopped would, status 141 and no message (no one reads it), and the process's
    handling of signals stays as it is. stdout is pointed at the null device first, so
    that Python's flush at exit drops what is still buffered rather than complain."""
    with suppress(OSError, ValueError):  # (a stdout without a descriptor: a test's capture)
        descriptor = sys.stdout.fileno()
        os.dup2(os.open(os.devnull, os.O_WRONLY), descriptor)
    raise typer.Exit(141)


@contextmanager
def opened_ledger(settings: Settings) -> Iterator[Ledger]:
    from ..bootstrap import open_ledger

    with using_store(settings.database_url):
        # An operator's command on a mistyped store path says so instead of making a new
        # one.
        ledger = open_ledger(settings, auto_migrate=False)
        try:
            yield ledger
        finally:
            ledger.close()
