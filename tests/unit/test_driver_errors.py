"""One mapper per driver says what its errors mean (projections/driver_errors.py): to the
library's callers (a lost race, a store out of reach) and to a request (not migrated:
StoreNotReady; cannot answer now: StoreUnavailable); anything else stays as it was."""

from __future__ import annotations

import sqlite3

import psycopg
import pytest
from eventsourcing import persistence
from psycopg_pool import PoolTimeout

from session_ledger.domain.errors import StoreNotReady, StoreUnavailable
from session_ledger.projections.driver_errors import POSTGRES, SQLITE, DriverErrors


@pytest.mark.parametrize(
    ("error", "library"),
    [
        (sqlite3.IntegrityError("UNIQUE constraint failed"), persistence.IntegrityError),
        (sqlite3.OperationalError("database is locked"), persistence.OperationalError),
        (sqlite3.DatabaseError("file is not a database"), persistence.DatabaseError),
        (sqlite3.Error("other"), persistence.PersistenceError),
    ],
)
def test_sqlite_errors_as_the_librarys(error: Exception, library: type[Exception]) -> None:
    converted = SQLITE.library(error)
    assert type(converted) is library and converted.__cause__ is error
    assert str(error) in str(converted)


@pytest.mark.parametrize(
    ("error", "library"),
    [
        (psycopg.errors.UniqueViolation("duplicate key"), persistence.IntegrityError),
        (psycopg.OperationalError("server closed the connection"), persistence.OperationalError),
        (psycopg.InterfaceError("connection is closed"), persistence.InterfaceError),
        (psycopg.errors.UndefinedTable("no table"), persistence.ProgrammingError),
    ],
)
def test_psycopg_errors_as_the_librarys(error: Exception, library: type[Exception]) -> None:
    converted = POSTGRES.library(error)
    assert type(converted) is library and converted.__cause__ is error


def test_an_error_of_no_driver_is_left_as_it_is() -> None:
    error = ValueError("not the driver's")
    assert SQLITE.library(error) is error and POSTGRES.library(error) is error
    assert SQLITE.store(error, "migrate") is error and POSTGRES.store(error, "migrate") is error


@pytest.mark.parametrize(
    ("mapper", "error", "domain", "said"),
    [
        (SQLITE, sqlite3.OperationalError("no such table: t"), StoreNotReady, "run migrate"),
        (SQLITE, sqlite3.OperationalError("database is locked"), StoreUnavailable, "SQLite: "),
        (POSTGRES, psycopg.errors.UndefinedTable("t"), StoreNotReady, "run migrate"),
        (POSTGRES, psycopg.errors.UndefinedFunction("f"), StoreNotReady, "run migrate"),
        (POSTGRES, PoolTimeout("30 s"), StoreUnavailable, "no PostgreSQL connection: 30 s"),
        (POSTGRES, psycopg.OperationalError("refused"), StoreUnavailable, "PostgreSQL unreachable"),
    ],
)
def test_driver_errors_as_a_requests(
    mapper: DriverErrors, error: Exception, domain: type[Exception], said: str
) -> None:
    converted = mapper.store(error, "run migrate")
    assert type(converted) is domain and said in str(converted)


def test_a_fault_of_the_callers_is_no_store_failure() -> None:
    for mapper, error in ((SQLITE, sqlite3.IntegrityError("UNIQUE constraint failed")),
                          (POSTGRES, psycopg.errors.UniqueViolation("duplicate key"))):  # fmt: skip
        assert mapper.store(error, "run migrate") is error


def test_a_connection_not_made_is_the_librarys_interface_error() -> None:
    error = sqlite3.OperationalError("unable to open database file")
    converted = SQLITE.unconnected(error)
    assert type(converted) is persistence.InterfaceError and converted.__cause__ is error


def test_a_lost_connection_is_the_stores_failure_not_the_calls() -> None:
    for lost in (PoolTimeout("30 s"), psycopg.OperationalError("refused"),
                 psycopg.InterfaceError("the connection is closed")):  # fmt: skip
        assert isinstance(lost, POSTGRES.lost)
    assert not isinstance(psycopg.errors.UniqueViolation("duplicate key"), POSTGRES.lost)
    assert SQLITE.lost == ()  # a file: no connection to lose
