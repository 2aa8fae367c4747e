"""The context window view: `ChatMemoryBuffer.get` over stored token counts, reading
the newest rows only as far as the window reaches (O(window), not O(history))."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from session_ledger.domain.errors import AnswerTooLarge
from session_ledger.domain.ports import ACTIVE
from session_ledger.domain.tokens import NamedTokenizer, TailEntry, window_length

from .bodies import StoredMessages, decode_body
from .dialect import ViewStore
from .sql import (
    HEAD_VERSION,
    HEAD_VERSION_SELECT,
    MAX_TAIL_BATCH,
    READ_ATTEMPTS,
    TAIL_BATCH,
    TAIL_BODY_BYTES,
    Reader,
)


class ContextReads(ViewStore):
    """Reads of the context window, now or at a past version."""

    def context_window(
        self,
        session_id: uuid.UUID,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
        version: int | None = None,
        max_bytes: int | None = None,
    ) -> StoredMessages:
        sid = self._sid(session_id)
        if version is not None:  # a past version's rows never change: any read is consistent
            with self._reading_past() as read:
                window, _ = self._window(read, sid, version, token_limit, initial_token_count,
                                         tokenizer, session_id, max_bytes)  # fmt: skip
            return StoredMessages(version, self._opened(session_id, window))
        # The live rows, in the key order of their own table (a plan no statistics can
        # spoil). Each statement also reads the session's version; versions only grow, so
        # equal versions at the first and the last statement mean no write came between,
        # without holding a transaction open. Otherwise (or where a statement saw a
        # version it cannot name: None) read again.
        for _ in range(READ_ATTEMPTS):
            with self._reading() as read:
                window, seen = self._window(read, sid, None, token_limit, initial_token_count,
                                            tokenizer, session_id, max_bytes)  # fmt: skip
            if len(seen) == 1 and None not in seen:
                return StoredMessages(seen.pop(), self._opened(session_id, window))
        with self.snapshot() as read:
            window, seen = self._window(read, sid, None, token_limit, initial_token_count,
                                        tokenizer, session_id, max_bytes)  # fmt: skip
        return StoredMessages(max(v or 0 for v in seen), self._opened(session_id, window))

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
    ) -> tuple[list[tuple[str, str]], set[Any]]:
        """The window's messages as stored, (role, body), and the versions of the session
        its statements read (now: one, unless a write came between them)."""
        # Bodies come with the tail: one statement for a window within the first batch.
        # Rows are tuples that start like a TailEntry: (role, alone, joined, message, id,
        # seen, size, most). A batch leaves out bodies over its share of TAIL_BODY_BYTES,
        # read once the window is known and its bytes are within `max_bytes`.
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
            versions = {self._version_holding_none(read, sid, ACTIVE, 0)}
        else:
            versions = set()
        read_rows: list[tuple[Any, ...]] = []
        sizes = [0]  # sizes[n]: the bytes of the newest n bodies

        def within(n: int) -> None:
            if max_bytes is not None and sizes[n] > max_bytes:
                raise AnswerTooLarge(
                    f"the window of token_limit {token_limit} holds over {max_bytes} bytes "
                    "of messages, more than one answer holds: give a smaller token_limit, "
                    "or read the history page by page"
                )

        def tail() -> Iterator[Sequence[Any]]:
            for row in self._tail(read, sid, version, first, versions):
                if tokenizer is not None and row[3] is None:  # its text is counted here
                    row = (self._tail_bodies(read, sid, version or row[5], [row]) or [row])[0]
                read_rows.append(row)
                sizes.append(sizes[-1] + row[6])
                if tokenizer is None:
                    yield row
                else:
                    body = self._opened(session_id, [row], 3)[0][3]
                    content = "" if body is None else decode_body(row[0], body).content
                    yield TailEntry(row[0], *tokenizer.count(content))

        k = window_length(tail(), token_limit, initial_token_count, within)
        within(k)
        window = read_rows[:k]
        if version is None and len(versions) == 1:
            version = next(iter(versions))
        if version is not None:  # (else a write came between: the caller reads again)
            window = self._tail_bodies(read, sid, version, window)
        return [(r[0], r[3]) for r in reversed(window)], versions

    def _tail_bodies(
        self, read: Reader, sid: Any, version: int, rows: list[tuple[Any, ...]]
    ) -> list[tuple[Any, ...]]:
        """`rows` (newest first) with the bodies the tail left out read, at `version`; none
        if one is not found (the session was erased since: the ledger says so)."""
        left_out = [row for row in rows if row[3] is None]
        if not left_out:
            return rows
        bodies = self._large_bodies(read, sid, ACTIVE, version, left_out[-1][4],
                                    left_out[0][4], min(row[7] for row in left_out))  # fmt: skip
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
        alone, joined, message, id, seen, size, most): `seen` is the session's version as
        read (a past version's rows never change: there it is NULL); `message` is NULL
        where the body's `size` is over `most`."""
        most = TAIL_BODY_BYTES // limit  # bodies over it are NULL here (see `_window`)
        columns = f"role, tokens, tokens_joined, {self._inline_body(most)}, message_id"
        sizes = f"{self.body_bytes} AS size, {most} AS most"
        select: tuple[str, tuple[Any, ...]]
        if version is None:
            select = (f"{columns}, {HEAD_VERSION} AS seen, {sizes}", (sid,))
        else:
            select = (f"{columns}, NULL AS seen, {sizes}", ())
        return self._rows(read, select, 4, sid, ACTIVE, version, where, params,
                          newest_first=True, batch=limit)  # fmt: skip

    def _tail(
        self,
        read: Reader,
        sid: Any,
        version: int | None,
        first: list[tuple[Any, ...]],
        versions: set[Any],
    ) -> Iterator[tuple[Any, ...]]:
        """The messages newest first: the first batch, then growing batches read as they
        are consumed (each notes the session version it saw in `versions`)."""
        rows, batch = first, TAIL_BATCH
        while True:
            yield from rows
            if len(rows) < batch:
                return
            before, batch = rows[-1][4], min(batch * 2, MAX_TAIL_BATCH)
            rows = self._tail_rows(read, sid, version, " AND message_id < ?", (before,), batch)
            if not rows:  # an empty batch says no version: ask for it
                rows = self._tuples(read, HEAD_VERSION_SELECT, (sid,))
                versions.update(r[0] for r in rows)
                return
            versions.add(rows[0][5])
