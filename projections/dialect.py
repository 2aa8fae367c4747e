"""What each SQL dialect supplies to the views (`Dialect`) and to the tables beside them
(`TableConnections`), and the row reads the views share (`ViewRows`)."""

from __future__ import annotations

import heapq
import operator
import uuid
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from datetime import datetime
from typing import Any, Protocol

from session_ledger.domain.ports import ACTIVE

from .changes import MessageRow
from .sql import BODIES_BATCH, ENDED_AT, HEAD_COUNTS_SELECT, LIVE, LIVE_AT, Reader


class Dialect(ABC):
    """How one SQL dialect reaches its database: readers, write transactions, statements,
    and the store's forms of ids and times. Every view part is given one."""

    no_limit: Any = -1  # a LIMIT that takes all rows (needed before an OFFSET)
    body_bytes = "length(CAST(message AS BLOB))"  # a row's body size in bytes
    # Where rows that ended at a version are looked up (session_id, valid_to = ?).
    ended_rows = "ledger_ended_messages"
    event_position = "rowid"  # the column that orders the whole event log

    @abstractmethod
    def reading(self) -> AbstractContextManager[Reader]:
        """A reader outside any transaction: each statement reads its own snapshot."""

    def reading_past(self) -> AbstractContextManager[Reader]:
        """A reader for the rows of a past version (message id ranges, version filters)."""
        return self.reading()

    @abstractmethod
    def snapshot(self) -> AbstractContextManager[Reader]:
        """A read-only transaction: every statement sees the same state (long reads)."""

    @abstractmethod
    def execute(self, cursor: Any, sql: str, params: Sequence[Any]) -> None: ...

    @abstractmethod
    def drop_erased_keys(self) -> bool:
        """After an erasure committed: drop what the store's files keep of the deleted
        data key rows; false when that must wait (a reader held on)."""

    @abstractmethod
    def drop_old_bytes(self) -> str:
        """Drop what the store's files keep of rows rewritten in place; what was done (or
        what the operator must do)."""

    @abstractmethod
    def write_transaction(self) -> AbstractContextManager[Any]:
        """A write transaction that keeps other writers of events out until it ends."""

    def committing(self) -> AbstractContextManager[Any]:
        """A short transaction of its own that holds no other writer off for long."""
        return self.write_transaction()

    @abstractmethod
    def appending(self) -> AbstractContextManager[Any]:
        """A write transaction of rows beside the events (the access log) that holds no
        event writer off; a duplicate key raises eventsourcing's IntegrityError."""

    @abstractmethod
    def reader(self, cursor: Any) -> Reader: ...

    @abstractmethod
    def stream(self, sql: str) -> AbstractContextManager[Iterator[Any]]:
        """Rows of a query, fetched as iterated (for whole-table reads)."""

    @abstractmethod
    def insert_rows(
        self, cursor: Any, sid: Any, version: int, status: str, rows: Sequence[MessageRow]
    ) -> None: ...

    @abstractmethod
    def sid(self, session_id: uuid.UUID) -> Any: ...

    @abstractmethod
    def time(self, value: datetime) -> Any: ...

    @abstractmethod
    def datetime(self, value: Any) -> datetime: ...

    @abstractmethod
    def close(self) -> None:
        """Close the connections (views that own theirs: a standby's)."""


class TableConnections(ABC):
    """How one SQL dialect reaches the tables kept beside the ledger's own (API keys:
    `api_key_table.py`; rate limits: `rate_limit_store.py`): a few pooled connections of
    their own, statements written with `?` placeholders as the views' are, and the
    driver's errors said as the domain's (`driver_errors.py`): a table not made yet is
    StoreNotReady, a store that cannot answer now StoreUnavailable."""

    @abstractmethod
    def transaction(
        self, *, writes: bool = False, serial: bool = False
    ) -> AbstractContextManager[Any]:
        """A cursor inside one transaction. `writes`: one that writes, holding SQLite's
        write lock from its start (writers queue rather than fail on an upgrade);
        `serial`: one at a time across processes (a migration, a first key)."""

    @abstractmethod
    def execute(self, cursor: Any, sql: str, params: Sequence[Any] = ()) -> None:
        """Run `sql`, written with `?` placeholders, on a cursor of `transaction`."""

    @abstractmethod
    def close(self) -> None:
        """Close the connections (those lent now close when given back)."""


class BodyOpener(Protocol):
    """Opens the sealed bodies of rows read (`key_rows.SessionContent`)."""

    def opened(
        self, session_id: uuid.UUID, rows: Sequence[Sequence[Any]], at: int = 1
    ) -> Sequence[Any]: ...


class ViewRows:
    """The message rows' reads every view shares, through one dialect; bodies opened by
    the session content's keys (`key_rows.SessionContent`). Counts the rows it fetched
    (`rows_read`: the cost model the tests check)."""

    def __init__(self, dialect: Dialect, content: BodyOpener) -> None:
        self.dialect = dialect
        self.content = content
        self.rows_read = 0

    def matching(
        self,
        read: Reader,
        select: tuple[str, tuple[Any, ...]],
        id_index: int,
        sid: Any,
        status: str,
        version: int | None,
        where: str = "",
        params: tuple[Any, ...] = (),
        *,
        newest_first: bool = False,
        limit: int | None = None,
        offset: int = 0,
        batch: int | None = None,
    ) -> list[tuple[Any, ...]]:
        """Rows of `status` live now (version None) or at `version` that meet `where` (an
        `AND ...` with `params`), in message id order, as tuples of `select` (its columns,
        with the message id at `id_index` for a past version, and their parameters).

        A past version's rows are those live since it or before, and those that ended
        after it: each table is read in its key order and the two are merged here (a
        UNION ALL of them was sorted whole by PostgreSQL). The live rows are read first,
        so a row that a write moves to the ended rows meanwhile is read twice, not missed;
        it is kept once.

        `batch`: a limit the ledger picks (the tail's batch sizes, a few values), written
        into the statement. PostgreSQL keeps a prepared statement's generic plan only if
        it costs no more than the custom ones; with a `LIMIT ?` (or an `OFFSET ?`) it
        cannot price, it planned every window read anew once statistics saw long
        sessions. A caller's `limit` and `offset` stay parameters. A past version's
        tables read `batch` rows each, and past the last row of a table whose read the
        batch cut that table is unread: the merged rows end there (at least `batch` of
        them, fewer only when both tables ran out), and the next batch goes on from it."""
        columns, column_params = select
        order = "DESC" if newest_first else "ASC"
        if version is None:
            page, page_params = self._page(limit, offset, batch)
            return self.tuples(
                read,
                f"SELECT {columns} FROM ledger_messages WHERE {LIVE}{where} "
                f"ORDER BY message_id {order}{page}",
                (*column_params, sid, status, *params, *page_params),
            )
        page, page_params = self._page(None if limit is None else offset + limit, 0, batch)
        arms = (("ledger_messages", LIVE_AT, (version,)),
                ("ledger_ended_messages", ENDED_AT, (version, version)))  # fmt: skip
        found = [
            self.tuples(
                read,
                f"SELECT {columns} FROM {table} WHERE {at}{where} "
                f"ORDER BY message_id {order}{page}",
                (*column_params, sid, status, *at_params, *params, *page_params),
            )
            for table, at, at_params in arms
        ]
        key = operator.itemgetter(id_index)
        rows: list[tuple[Any, ...]] = []
        for row in heapq.merge(*found, key=key, reverse=newest_first):
            if not rows or key(rows[-1]) != key(row):
                rows.append(row)
        if batch is not None:
            return _read_through(rows, found, batch, key, newest_first)
        return rows[offset:] if limit is None else rows[offset : offset + limit]

    def inline_body(self, most: int) -> str:
        """The body column of a read that leaves out bodies over `most` bytes (NULL):
        read after the answer is known to hold them (`bodies`), so that no read holds
        more bodies than its answer. A constant, as a batch size is (see `matching`)."""
        return f"CASE WHEN {self.dialect.body_bytes} <= {int(most)} THEN message END"

    def bodies(
        self, read: Reader, sid: Any, status: str, version: int, ids: Sequence[int],
        column: str = "message",
    ) -> dict[int, Any]:  # fmt: skip
        """`column` (the body, or e.g. its size) of the `status` rows of `version` with
        these message ids, by id (a version's rows never change: any later read finds
        them, unless the session was erased)."""
        found: dict[int, Any] = {}
        for start in range(0, len(ids), BODIES_BATCH):
            some = ids[start : start + BODIES_BATCH]
            listed = f" AND message_id IN ({', '.join('?' * len(some))})"
            rows = self.matching(read, (f"message_id, {column}", ()), 0, sid, status, version,
                              listed, tuple(some))  # fmt: skip
            found.update((row[0], row[1]) for row in rows)
        return found

    def opened(
        self, session_id: uuid.UUID, rows: Sequence[Sequence[Any]], at: int = 1
    ) -> Sequence[Any]:
        """`rows` with their body (column `at`) opened where sealed, after the read."""
        return self.content.opened(session_id, rows, at)

    def _page(
        self, limit: int | None, offset: int, batch: int | None
    ) -> tuple[str, tuple[Any, ...]]:
        """The LIMIT and OFFSET of a read (see `matching`), and their parameters."""
        if batch is not None:
            return f" LIMIT {int(batch)}", ()
        if offset:  # (SQLite takes an OFFSET only after a LIMIT)
            return " LIMIT ? OFFSET ?", (self.dialect.no_limit if limit is None else limit, offset)
        return ("", ()) if limit is None else (" LIMIT ?", (limit,))

    def version_holding_none(self, read: Reader, sid: Any, status: str, offset: int) -> int | None:
        """After a rows statement found no `status` message from position `offset` on: the
        session's version (0: no session), read with its counts in one statement, when that
        version holds none there either; None when it does: a write came between the two
        statements, and the empty rows are of an older version."""
        head = self.tuples(read, HEAD_COUNTS_SELECT, (sid,))
        if not head:
            return 0
        version, active, archived = head[0]
        return version if (active if status == ACTIVE else archived) <= offset else None

    def tuples(self, read: Reader, sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
        rows = read.tuples(sql, params)
        self.rows_read += len(rows)
        return rows

    def fetch(self, read: Reader, sql: str, params: Sequence[Any]) -> list[Any]:
        rows = read(sql, params)
        self.rows_read += len(rows)
        return rows


def _read_through(
    rows: list[tuple[Any, ...]],
    found: Sequence[list[tuple[Any, ...]]],
    batch: int,
    key: Callable[[tuple[Any, ...]], Any],
    newest_first: bool,
) -> list[tuple[Any, ...]]:
    """The merged `rows` as far as each table's batch in `found` read all of them: up to
    the first (in the rows' order) of the last rows of the tables the batch cut."""
    cut = [key(table[-1]) for table in found if len(table) == batch]
    if not cut:  # every table ran out: all its rows are here
        return rows
    reached = max(cut) if newest_first else min(cut)
    return rows[: next(n for n, row in enumerate(rows) if key(row) == reached) + 1]


class SQLStore(Protocol):
    """Where statements beside the views' own run (the evidence: `access_log.py`,
    `audit_search.py`): a dialect, and the rows read counted."""

    @property
    def dialect(self) -> Dialect: ...

    @property
    def rows(self) -> ViewRows: ...
