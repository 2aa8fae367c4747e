"""The context window view: `ChatMemoryBuffer.get` over stored token counts, reading
the newest rows only as far as the window reaches (O(window), not O(history))."""

from __future__ import annotations

import functools
import itertools
import uuid
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from session_ledger.domain.errors import AnswerTooLarge
from session_ledger.domain.ports import ACTIVE
from session_ledger.domain.tokens import Joins, NamedTokenizer, window_length

from .bodies import StoredMessages, body_text
from .dialect import Dialect, ViewRows
from .sql import (
    HEAD_VERSION,
    HEAD_VERSION_SELECT,
    MAX_TAIL_BATCH,
    READ_ATTEMPTS,
    TAIL_BATCH,
    TAIL_BODY_BYTES,
    Reader,
)


class Context:
    """Reads of the context window, now or at a past version."""

    def __init__(self, dialect: Dialect, rows: ViewRows) -> None:
        self.dialect = dialect
        self.rows = rows

    def context_window(
        self,
        session_id: uuid.UUID,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
        version: int | None = None,
        max_bytes: int | None = None,
        counted_by: NamedTokenizer | None = None,
    ) -> StoredMessages:
        """`tokenizer`: count by it (None: the stored counts, made by `counted_by`, whose
        text is counted again only where messages meet at whitespace, if it pre-tokenizes
        as cl100k_base does: `domain.tokens.JoinedWindow`)."""
        sid = self.dialect.sid(session_id)
        joiner = tokenizer or counted_by
        if joiner is not None and not joiner.pretokenized:
            joiner = None
        if version is not None:  # a past version's rows never change: any read is consistent
            with self.dialect.reading_past() as read:
                window, _ = self._window(read, sid, version, token_limit, initial_token_count,
                                         tokenizer, session_id, max_bytes, joiner)  # fmt: skip
            return StoredMessages(version, self.rows.opened(session_id, window))
        # The live rows, in the key order of their own table (a plan no statistics can
        # spoil). Each statement also reads the session's version; versions only grow, so
        # equal versions at the first and the last statement mean no write came between,
        # without holding a transaction open. Otherwise (or where a statement saw a
        # version it cannot name: None) read again.
        for _ in range(READ_ATTEMPTS):
            with self.dialect.reading() as read:
                window, seen = self._window(read, sid, None, token_limit, initial_token_count,
                                            tokenizer, session_id, max_bytes, joiner)  # fmt: skip
            if len(seen) == 1 and None not in seen:
                return StoredMessages(seen.pop(), self.rows.opened(session_id, window))
        with self.dialect.snapshot() as read:
            window, seen = self._window(read, sid, None, token_limit, initial_token_count,
                                        tokenizer, session_id, max_bytes, joiner)  # fmt: skip
        return StoredMessages(max(v or 0 for v in seen), self.rows.opened(session_id, window))

    def _window(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
        session_id: uuid.UUID,
        max_bytes: int | None,
        joiner: NamedTokenizer | None,
    ) -> tuple[list[tuple[str, str]], set[Any]]:
        """The window's messages as stored, (role, body), and the versions of the session
        its statements read (now: one, unless a write came between them)."""
        # Bodies come with the tail: one statement for a window within the first batch.
        # Rows are tuples (role, alone, joined, message, id, seen, open_end): open_end
        # NULL where the row was stored before the mark was.
        # A batch leaves out the bodies over its share of TAIL_BODY_BYTES (NULL), read once
        # the window is known to hold them and to be within `max_bytes`.
        bound = ""
        bound_params: tuple[Any, ...] = ()
        if version is not None:  # ids from the next one on were written after `version`
            bound = (" AND message_id < (SELECT next_message_id FROM ledger_timeline "
                     "WHERE session_id = ? AND version = ?)")  # fmt: skip
            bound_params = (sid, version)
        first = self._tail_rows(read, sid, version, bound, bound_params, TAIL_BATCH)
        if first:
            versions = {first[0][5]}
        elif version is None:  # no active message: the head's version, if it holds none
            versions = {self.rows.version_holding_none(read, sid, ACTIVE, 0)}
        else:
            versions = set()
        batches: list[list[tuple[Any, ...]]] = [first]  # the batches read, in order
        known = [0]  # the lengths the window is known to reach (window_length's `at_least`)

        def within(n: int) -> None:  # the newest n rows' bodies (those read) fit max_bytes
            # (A batch holds at most TAIL_BODY_BYTES: a few batches cannot pass them.)
            if max_bytes is None or TAIL_BODY_BYTES * len(batches) <= max_bytes:
                return
            if _held(batches, n) > max_bytes:
                raise _too_large(token_limit, max_bytes)

        rows = self._tail(read, sid, version, versions, batches, lambda: within(known[-1]))
        texts: dict[Any, str] = {}  # by message id: the texts read for counting
        text = functools.partial(self._text, read, sid, version, session_id, texts)
        entries: Iterator[Sequence[Any]] = rows
        if tokenizer is not None:
            entries = map(functools.partial(self._counted, tokenizer, text), rows)
        joins = None
        if joiner is not None:  # (its counting function itself, where it has one)
            joins = Joins(joiner.length or joiner.tokens, text, 6, joiner.longest)
        k = window_length(entries, token_limit, initial_token_count,
                          None if max_bytes is None else known.append, joins)  # fmt: skip
        within(k)
        window = list(itertools.islice(itertools.chain.from_iterable(batches), k))
        if version is None and len(versions) == 1:
            version = next(iter(versions))
        if version is not None:  # (else a write came between: the caller reads again)
            window = self._tail_bodies(read, sid, version, window, max_bytes, token_limit)
        return [(r[0], r[3]) for r in reversed(window)], versions

    @staticmethod
    def _counted(
        tokenizer: NamedTokenizer, text: Callable[[tuple[Any, ...]], str], row: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        """The row with its counts by `tokenizer`, from its text."""
        alone, joined, open_end = tokenizer.count(text(row))
        return (row[0], alone, joined, *row[3:6], open_end)

    def _text(
        self, read: Reader, sid: Any, version: int | None, session_id: uuid.UUID,
        texts: dict[Any, str], row: tuple[Any, ...],
    ) -> str:  # fmt: skip
        """The text of a row's message as LlamaIndex counts it (`str(content)`; a body
        the tail left out is read for it), kept in `texts`."""
        found = texts.get(row[4])
        if found is None:
            if row[3] is None:
                row = (self._tail_bodies(read, sid, version or row[5], [row]) or [row])[0]
            body = self.rows.opened(session_id, [row], 3)[0][3]
            found = texts[row[4]] = "" if body is None else body_text(row[0], body)
        return found

    def _tail_bodies(
        self, read: Reader, sid: Any, version: int, rows: list[tuple[Any, ...]],
        max_bytes: int | None = None, token_limit: int = 0,
    ) -> list[tuple[Any, ...]]:  # fmt: skip
        """`rows` (newest first) with the bodies the tail left out read, at `version`, if
        all their bodies fit in `max_bytes` (else AnswerTooLarge); none if one is not
        found (the session was erased since: the ledger says so)."""
        left_out = [row[4] for row in rows if row[3] is None]
        if not left_out:
            return rows
        if max_bytes is not None:
            sizes = self.rows.bodies(read, sid, ACTIVE, version, left_out, self.dialect.body_bytes)
            if _held([rows], len(rows)) + sum(sizes.values()) > max_bytes:
                raise _too_large(token_limit, max_bytes)
        bodies = self.rows.bodies(read, sid, ACTIVE, version, left_out)
        if len(bodies) < len(left_out):
            return []
        return [(*row[:3], bodies[row[4]], *row[4:]) if row[3] is None else row for row in rows]

    def _tail_rows(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        where: str,
        params: tuple[Any, ...],
        limit: int,
    ) -> list[tuple[Any, ...]]:
        """Up to `limit` active rows newest first, that meet `where`, as tuples (role,
        alone, joined, message, id, seen, open_end): `seen` is the session's version as read (a past
        version's rows never change: there it is NULL); `message` is NULL where the body
        is over the batch's share of TAIL_BODY_BYTES."""
        inline = self.rows.inline_body(TAIL_BODY_BYTES // limit)
        columns = f"role, tokens, tokens_joined, {inline}, message_id"
        select: tuple[str, tuple[Any, ...]]
        if version is None:
            select = (f"{columns}, {HEAD_VERSION} AS seen, open_end", (sid,))
        else:
            select = (f"{columns}, NULL AS seen, open_end", ())
        return self.rows.matching(read, select, 4, sid, ACTIVE, version, where, params,
                                  newest_first=True, batch=limit)  # fmt: skip

    def _tail(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        versions: set[Any],
        batches: list[list[tuple[Any, ...]]],
        before_batch: Callable[[], None],
    ) -> Iterator[tuple[Any, ...]]:
        """The messages newest first: the first batch (`batches[0]`), then growing batches
        read as they are consumed, each added to `batches` (and the session version it saw
        to `versions`), each after `before_batch()` (which may raise to stop the read)."""
        rows, batch = batches[0], TAIL_BATCH
        while True:
            yield from rows
            if len(rows) < batch:
                return
            before_batch()
            before, batch = rows[-1][4], min(batch * 2, MAX_TAIL_BATCH)
            rows = self._tail_rows(read, sid, version, " AND message_id < ?", (before,), batch)
            if not rows:  # an empty batch says no version: ask for it
                rows = self.rows.tuples(read, HEAD_VERSION_SELECT, (sid,))
                versions.update(r[0] for r in rows)
                return
            batches.append(rows)
            versions.add(rows[0][5])


def _held(batches: list[list[tuple[Any, ...]]], n: int) -> int:
    """The bytes of the bodies the newest `n` rows of `batches` came with."""
    rows = itertools.islice(itertools.chain.from_iterable(batches), n)
    return sum(len(row[3]) for row in rows if row[3] is not None)


def _too_large(token_limit: int, max_bytes: int) -> AnswerTooLarge:
    return AnswerTooLarge(
        f"the window of token_limit {token_limit} holds over {max_bytes} bytes of messages, "
        "more than one answer holds: give a smaller token_limit, or read the history page "
        "by page"
    )
