"""What a database driver's errors mean to the project: one mapper per driver (`SQLITE`
for sqlite3, `POSTGRES` for psycopg and its pool), used wherever one of them is
translated.

A driver error is said in one of two vocabularies, by who catches it:
- `library`: the eventsourcing library's persistence errors, as its recorders raise
  them (and `unconnected`, as its pools do); the write loop and the API catch those (an
  IntegrityError is a lost race, an OperationalError a store out of reach).
- `store`: the domain's, for a call that cannot be answered now: `StoreNotReady` when
  a table or function it reads is not made yet (run `migrate`), `StoreUnavailable` when
  the store cannot answer now (busy, locked, out of reach, no pooled connection in time:
  503 with Retry-After). Any other error is a fault of the caller's and stays as it is.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from types import ModuleType

import psycopg
from eventsourcing import persistence
from psycopg_pool import PoolTimeout

from session_ledger.domain.errors import StoreNotReady, StoreUnavailable

NOT_MIGRATED = "the store's tables are not made yet: run `session-ledger migrate`"
Pairs = Sequence[tuple[type[BaseException], type[Exception]]]


class DriverErrors:
    """One driver's errors as the library's (`library`) or the domain's (`store`)."""

    def __init__(
        self,
        library: Pairs,
        missing: Callable[[BaseException], bool],
        unavailable: Sequence[tuple[type[BaseException], str]],
        lost: tuple[type[BaseException], ...] = (),
    ) -> None:
        self._library = tuple(library)  # most specific first
        self._missing = missing
        self._unavailable = tuple(unavailable)  # (error, what the message says it was)
        # A connection lost, refused or not had in time: the store, not the call, failed
        # (the API answers 503; at start-up the store is not ready).
        self.lost = lost

    def library(self, error: BaseException) -> BaseException:
        """The library's error of the same meaning, caused by `error` (not a driver
        error: `error` itself)."""
        for driver, library in self._library:
            if isinstance(error, driver):
                converted = library(str(error))
                converted.__cause__ = error
                return converted
        return error

    @staticmethod
    def unconnected(error: BaseException) -> BaseException:
        """A connection the driver could not make, as the library's pools say it (a pool
        of the ledger's own makes connections in the library's place)."""
        converted = persistence.InterfaceError(str(error))
        converted.__cause__ = error
        return converted

    def store(self, error: BaseException, not_ready: str = NOT_MIGRATED) -> BaseException:
        """`StoreNotReady(not_ready)` when `error` says a table or function is missing,
        `StoreUnavailable` when it says the store cannot answer now, else `error`."""
        if self._missing(error):
            return StoreNotReady(not_ready)
        for driver, said in self._unavailable:
            if isinstance(error, driver):
                return StoreUnavailable(f"{said}: {error}")
        return error


# PEP 249's exception names, the most derived first (`Error` and `DatabaseError` last):
# every driver raises these, and the library's persistence module names its own the same.
_PEP249 = (
    "InterfaceError", "DataError", "OperationalError", "IntegrityError", "InternalError",
    "ProgrammingError", "NotSupportedError", "DatabaseError",
)  # fmt: skip


def _pep249(driver: ModuleType) -> Pairs:
    """A PEP 249 driver's exceptions paired with the library's of the same name."""
    pairs = [(getattr(driver, name), getattr(persistence, name)) for name in _PEP249]
    return (*pairs, (driver.Error, persistence.PersistenceError))


def _sqlite_missing(error: BaseException) -> bool:
    return isinstance(error, sqlite3.OperationalError) and "no such table" in str(error)


def _postgres_missing(error: BaseException) -> bool:
    return isinstance(error, psycopg.errors.UndefinedTable | psycopg.errors.UndefinedFunction)


SQLITE = DriverErrors(
    library=_pep249(sqlite3),
    missing=_sqlite_missing,
    # Busy or locked past the timeout, a disk I/O error, a file it cannot open now.
    unavailable=((sqlite3.OperationalError, "SQLite"),),
)

POSTGRES = DriverErrors(
    library=_pep249(psycopg),
    missing=_postgres_missing,
    # No pooled connection within the wait: nothing was sent, so a retry would wait again.
    unavailable=(
        (PoolTimeout, "no PostgreSQL connection"),
        (psycopg.OperationalError, "PostgreSQL unreachable"),
    ),
    lost=(psycopg.OperationalError, psycopg.InterfaceError),
)
