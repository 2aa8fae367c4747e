"""Rebuild: re-derive every view from the event log, and check views against it.

The event log is read in notification order, folded per session through the Session
aggregate itself (so message ids and counts come out as they did live), and fed to the
same `view_changes` the live write path uses. `check` rebuilds into a scratch SQLite
database and compares the two row by row.
"""

from __future__ import annotations

import itertools
import tempfile
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from eventsourcing.sqlite import SQLiteDatastore

from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.ports import WriteBatch
from session_ledger.domain.session import Session
from session_ledger.domain.tokens import LazyCounts, NamedTokenizer

from .changes import view_changes
from .key_rows import SessionContent
from .sqlite import SQLiteDialect, SQLiteLedgerRecorder, sqlite_views
from .view_writes import EventsDisagree
from .views import SQLViews
from .write_turns import WriteTurns

Progress = Callable[[int], None]


def write_batches(events: Iterable[Any], tokenizer: NamedTokenizer) -> Iterator[WriteBatch]:
    """One WriteBatch per event, with the state before and after it, as the live path."""
    sessions: dict[Any, Session] = {}
    for event in events:
        before = sessions.get(event.originator_id)
        first_message_id = before.next_message_id if before is not None else 0
        after = event.mutate(before)
        sessions[event.originator_id] = after
        yield WriteBatch(
            session_id=event.originator_id,
            tenant=after.tenant,
            key=after.key,
            events=(event,),
            first_message_id=first_message_id,
            message_count=after.message_count,
            archived_count=after.archived_count,
            next_message_id=after.next_message_id,
            # counted when the views' handler of the event reads them (only the handler
            # of an event that adds messages does; the live write counts them before)
            counts=LazyCounts(tokenizer, added_messages(event), message_text),
        )


def added_messages(event: Any) -> Sequence[dict[str, Any]]:
    """The messages `event` adds: its `messages`, or the one `message` that ends a stream."""
    messages: Sequence[dict[str, Any]] | None = getattr(event, "messages", None)
    if messages is not None:
        return messages
    message: dict[str, Any] | None = getattr(event, "message", None)
    return () if message is None else (message,)


def message_text(message: dict[str, Any]) -> str | None:
    """A stored message's text, as its token counts were made from when it was written."""
    return ChatMessage(message["role"], tuple(message["blocks"]), {}).content


def rebuild(
    source: SQLViews, mapper: Any, tokenizer: NamedTokenizer, *, target: SQLViews | None = None,
    progress: Progress | None = None,
) -> int:  # fmt: skip
    """Replace `target`'s views (default: the source's own) with ones derived from the
    events in `source`; writers wait meanwhile. Returns the number of events."""
    target = target or source
    if target is source:  # read the log inside the transaction that holds writers off
        with target.rebuilding() as (cursor, read):
            return _replay_into(
                target, cursor, source.stored_events(read), mapper, tokenizer, progress
            )
    with source.snapshot() as read, target.rebuilding() as (cursor, _):
        return _replay_into(target, cursor, source.stored_events(read), mapper, tokenizer, progress)


def _replay_into(
    target: SQLViews, cursor: Any, stored: Iterable[Any], mapper: Any,
    tokenizer: NamedTokenizer, progress: Progress | None,
) -> int:  # fmt: skip
    count = 0
    records, decoded = itertools.tee(stored)  # read in step: tee holds one record
    events = (mapper.to_domain_event(s) for s in decoded)
    for record, batch in zip(records, write_batches(events, tokenizer), strict=True):
        target.writer.apply_changes(cursor, target.content.sealed_changes(view_changes(batch)),
                                    (record,), check_kept=True)  # fmt: skip
        count += 1
        if progress is not None and count % 1000 == 0:
            progress(count)
    if progress is not None:
        progress(count)
    return count


def _differences(
    table: str, key: list[str], live: Iterable[dict[str, Any]], rebuilt: Iterable[dict[str, Any]]
) -> Iterator[str]:
    """The rows of `table` that differ, each stored row paired with the rebuilt row of
    its key (a row missing on one side shows as missing, not paired with the next). Both
    come in key order, session first: one session's rows are held at a time."""
    sessions = _merged(
        itertools.groupby(live, lambda row: row["session_id"]),
        itertools.groupby(rebuilt, lambda row: row["session_id"]),
    )
    for have, want in sessions:
        stored = {tuple(row[c] for c in key): tuple(row.values()) for row in have}
        derived = {tuple(row[c] for c in key): tuple(row.values()) for row in want}
        for k in sorted(stored.keys() | derived.keys(), key=repr):
            if stored.get(k) != derived.get(k):
                yield f"{table}: stored {stored.get(k)} but the events give {derived.get(k)}"


def _merged(
    left: Iterator[tuple[Any, Iterator[dict[str, Any]]]],
    right: Iterator[tuple[Any, Iterator[dict[str, Any]]]],
) -> Iterator[tuple[Iterable[dict[str, Any]], Iterable[dict[str, Any]]]]:
    """Pairs of one session's rows from two streams grouped by session in one order;
    a session only one stream has is paired with no rows."""
    a, b = next(left, None), next(right, None)
    while a is not None or b is not None:
        if b is None or (a is not None and a[0] < b[0]):
            assert a is not None
            yield list(a[1]), ()
            a = next(left, None)
        elif a is None or b[0] < a[0]:
            yield (), list(b[1])
            b = next(right, None)
        else:
            yield list(a[1]), list(b[1])
            a, b = next(left, None), next(right, None)


def check(
    source: SQLViews, mapper: Any, tokenizer: NamedTokenizer, *, limit: int = 20,
    progress: Progress | None = None,
) -> list[str]:  # fmt: skip
    """Rebuild into scratch tables and list where the live views differ (empty: none)."""
    with tempfile.TemporaryDirectory(prefix="ledger-check-") as scratch_dir:
        datastore = SQLiteDatastore(str(Path(scratch_dir) / "views.db"))
        dialect = SQLiteDialect(datastore, WriteTurns(None, 5))  # (a file no one else opens)
        recorder = SQLiteLedgerRecorder(dialect, sqlite_views(dialect, SessionContent(None)))
        recorder.create_table()
        scratch = recorder.views
        try:
            differences: list[str] = []
            try:
                rebuild(source, mapper, tokenizer, target=scratch, progress=progress)
            except EventsDisagree as disagreement:
                return [str(disagreement)]
            for table in source.view_tables:
                key = source.view_order[table].split(", ")
                found = _differences(table, key, source.dump(table), scratch.dump(table))
                differences += itertools.islice(found, limit - len(differences))
            return differences
        finally:
            datastore.close()
