"""The transcript view: the history now or at any past version (temporal rows: live
since `valid_from`, ended at `valid_to`), a message by position, what a version ended."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence
from typing import Any

from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.ports import ACTIVE

from .bodies import StoredMessages, decode_body
from .dialect import Dialect, ViewRows
from .sql import HEAD_VERSION, LIVE, PAGE_INLINE_BYTES


class Transcript:
    """Reads of the transcript."""

    def __init__(self, dialect: Dialect, rows: ViewRows) -> None:
        self.dialect = dialect
        self.rows = rows

    def history(
        self,
        session_id: uuid.UUID,
        status: str,
        offset: int,
        limit: int | None,
        version: int | None = None,
        last: int | None = None,
    ) -> StoredMessages:
        sid = self.dialect.sid(session_id)
        # `last`: the newest `last` rows, read newest first (as many rows as asked, however
        # long the history), then put in order and cut to `limit`.
        newest = last is not None
        take, skip = (last, 0) if newest else (limit, offset)
        if version is not None:  # (the id orders the merge of a past version's tables)
            with self.dialect.reading() as read:
                rows = self.rows.matching(read, ("role, message, message_id", ()), 2, sid, status,
                                          version, newest_first=newest, limit=take,
                                          offset=skip)  # fmt: skip
            rows = _in_order(rows, last, limit)
            return StoredMessages(version, self.rows.opened(session_id, rows))
        past_the_end = skip if take != 0 else sys.maxsize  # (no row is in a page of 0)
        version, rows = self._at_head(sid, status, "role, message", past_the_end,
                                      newest_first=newest, limit=take, offset=skip)  # fmt: skip
        return StoredMessages(version, self.rows.opened(session_id, _in_order(rows, last, limit)))

    def history_page(
        self,
        session_id: uuid.UUID,
        status: str,
        offset: int,
        limit: int,
        max_bytes: int,
        version: int | None = None,
        after: int | None = None,
        last: int | None = None,
    ) -> StoredMessages:
        if limit == 0 or last == 0:
            return self.history(session_id, status, offset, 0, version)
        sid = self.dialect.sid(session_id)
        if last is not None:  # the page starts at the `last`-th newest row, of one version
            version, after = self._newest_start(sid, status, last, version)
            if version == 0:
                return StoredMessages(0, [])
        where, params = ("", ()) if after is None else (" AND message_id > ?", (after,))
        # Rows (role, small body or NULL, id, size); one more than the page: is there more?
        inline, body_bytes = self.rows.inline_body(PAGE_INLINE_BYTES), self.dialect.body_bytes
        columns = f"role, {inline}, message_id, {body_bytes}"
        if version is not None:
            with self.dialect.reading_past() as read:
                if offset:  # a past version's tables are merged here: to its offset, ids only
                    skipped = self.rows.matching(
                        read,
                        ("message_id", ()),
                        0,
                        sid,
                        status,
                        version,
                        where,
                        params,
                        limit=1,
                        offset=offset - 1,
                    )
                    if not skipped:
                        return StoredMessages(version, [])
                    where, params = f"{where} AND message_id > ?", (*params, skipped[0][0])
                    offset = 0
                rows = self.rows.matching(
                    read,
                    (columns, ()),
                    2,
                    sid,
                    status,
                    version,
                    where,
                    params,
                    limit=limit + 1,
                    offset=offset,
                )
        else:
            version, rows = self._at_head(sid, status, columns, offset, where, params,
                                          limit=limit + 1, offset=offset)  # fmt: skip
            if not rows:
                return StoredMessages(version, [])
        page: list[tuple[Any, ...]] = []
        size = 0
        for row in rows[:limit]:
            if page and size + row[3] > max_bytes:
                break
            page.append(row)
            size += row[3]
        following = page[-1][2] if len(page) < len(rows) else None
        return StoredMessages(version, self._page_bodies(session_id, sid, status, version, page),
                              following)  # fmt: skip

    def _newest_start(
        self, sid: Any, status: str, last: int, version: int | None
    ) -> tuple[int, int | None]:
        """(the version read, the `after` its newest `last` rows of `status` start from;
        None: from the first, as it holds fewer). Now: the version the row was read at, or
        that holds fewer, read again in one snapshot if a write came between (0: no
        session)."""
        nth = last - 1
        if version is None:
            version, found = self._at_head(sid, status, "message_id", nth, newest_first=True,
                                           limit=1, offset=nth)  # fmt: skip
        else:
            with self.dialect.reading_past() as read:
                found = self.rows.matching(read, ("message_id", ()), 0, sid, status, version,
                                           newest_first=True, limit=1, offset=nth)  # fmt: skip
        return version, found[0][0] - 1 if found else None

    def _at_head(
        self, sid: Any, status: str, columns: str, past_the_end: int, where: str = "",
        params: tuple[Any, ...] = (), **page: Any,
    ) -> tuple[int, list[tuple[Any, ...]]]:  # fmt: skip
        """The session's version now, and its `status` rows that meet `where` (`matching`
        with `page`), as `columns` and that version last: one statement. No rows name no
        version: a second statement reads it (0: no session), and one that finds a row
        from position `past_the_end` on means a write came between the two, so both are
        read again in one snapshot."""
        select = (f"{columns}, {HEAD_VERSION} AS seen", (sid,))
        seen = None
        for reading in (self.dialect.reading, self.dialect.snapshot):
            with reading() as read:
                rows = self.rows.matching(read, select, 0, sid, status, None, where, params,
                                          **page)  # fmt: skip
                if rows:
                    return rows[0][-1], rows
                seen = self.rows.version_holding_none(read, sid, status, past_the_end)
            if seen is not None:  # (in one snapshot it always is)
                break
        return seen or 0, []

    def _page_bodies(
        self, session_id: uuid.UUID, sid: Any, status: str, version: int,
        page: list[tuple[Any, ...]],
    ) -> Sequence[Any]:  # fmt: skip
        """(role, body) of the page's rows, the bodies it left out read now."""
        left_out = [row[2] for row in page if row[1] is None]
        if left_out:
            with self.dialect.reading_past() as read:
                bodies = self.rows.bodies(read, sid, status, version, left_out)
            if len(bodies) < len(left_out):  # erased since: the ledger says so
                return []
            page = [(r[0], bodies[r[2]]) if r[1] is None else r for r in page]
        return self.rows.opened(session_id, [(row[0], row[1]) for row in page])

    def ended_at(self, session_id: uuid.UUID, version: int) -> list[tuple[str, ChatMessage]]:
        """The messages (with their status) that left the history at `version`."""
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                f"SELECT status, role, message FROM {self.dialect.ended_rows} WHERE session_id = ? "
                "AND valid_to = ? ORDER BY status, message_id",
                (self.dialect.sid(session_id), version),
            )
        opened = self.rows.opened(
            session_id, [(r["status"], r["message"], r["role"]) for r in rows]
        )
        return [(status, decode_body(role, body)) for status, body, role in opened]

    def message_at(
        self, session_id: uuid.UUID, position: int, count: int
    ) -> tuple[int, ChatMessage] | None:
        # Counted from the nearer end: removing the last message reads one row, not all.
        # (A position past `count` is looked for from the start: a writer elsewhere may
        # have added it since `count`, and this write then fails on its version.)
        from_end = count // 2 <= position < count
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                f"SELECT message_id, role, message FROM ledger_messages WHERE {LIVE} "
                f"ORDER BY message_id {'DESC' if from_end else 'ASC'} LIMIT 1 OFFSET ?",
                (
                    self.dialect.sid(session_id),
                    ACTIVE,
                    count - 1 - position if from_end else position,
                ),
            )
        if not rows:
            return None
        ((message_id, role, body),) = self.rows.opened(
            session_id, [(rows[0]["message_id"], rows[0]["role"], rows[0]["message"])], 2
        )
        return message_id, decode_body(role, body)


def _in_order(
    rows: list[tuple[Any, ...]], last: int | None, limit: int | None
) -> list[tuple[Any, ...]]:
    """Rows read oldest first as they are; the newest `last` (read newest first) put in
    order, the first `limit` of them."""
    if last is None:
        return rows
    rows.reverse()
    return rows if limit is None else rows[:limit]
