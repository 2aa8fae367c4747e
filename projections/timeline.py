"""The timeline view: one row per event (time, actor, write id, hash chain, and the
head the event left), and the session rows: heads, time -> version, keys."""

from __future__ import annotations

import uuid
from datetime import datetime

from session_ledger.domain.ports import KEY_ORDER, PriorWrite, SessionHead

from .dialect import Dialect, ViewRows
from .sql import HEAD_VERSION_SELECT, NOT_CLEARED, VERSION_AT, prefix_upper_bound

# After the session of key `after` in the order sessions were made (its start's time,
# then its key): the cursor of that order is a key, as in key order.
CREATED_AFTER = (
    " AND (created_at, session_key) > (SELECT a.created_at, a.session_key"
    " FROM ledger_sessions a WHERE a.tenant = ? AND a.session_key = ?)"
)


class Timeline:
    """Reads of the timeline and the session rows."""

    def __init__(self, dialect: Dialect, rows: ViewRows) -> None:
        self.dialect = dialect
        self.rows = rows

    def version_at(self, session_id: uuid.UUID, when: datetime) -> int | None:
        """The session's version at time `when`: its last event at or before then.

        Event times never run backwards within a session, so the timeline is in time order
        by version and one statement binary-searches it through its primary key: log2(n)
        rows, and no index on time to keep up on every write."""
        sid = self.dialect.sid(session_id)
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read, VERSION_AT, (sid, self.dialect.time(when), self.dialect.time(when), sid)
            )
        return (rows[0]["version"] or None) if rows else None

    def head_version(self, session_id: uuid.UUID) -> int:
        """The session's version (0: none yet): one row, read by the timeline's key."""
        with self.dialect.reading() as read:
            rows = self.rows.tuples(read, HEAD_VERSION_SELECT, (self.dialect.sid(session_id),))
        return int(rows[0][0]) if rows else 0

    def session_head(self, session_id: uuid.UUID, version: int | None = None) -> SessionHead | None:
        # At a past version: that version's timeline row, which holds its counts too.
        bound, params = ("", ()) if version is None else (" AND t.version <= ?", (version,))
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                "SELECT s.tenant, s.session_key, s.created_at, t.version, t.message_count, "
                "t.archived_count, t.token_total, t.recorded_at, t.event_type "
                "FROM ledger_sessions s JOIN ledger_timeline t ON t.session_id = s.session_id "
                f"WHERE s.session_id = ?{bound} ORDER BY t.version DESC LIMIT 1",
                (self.dialect.sid(session_id), *params),
            )
        if not rows:
            return None
        r = rows[0]
        return SessionHead(
            r["tenant"],
            r["session_key"],
            r["version"],
            r["message_count"],
            r["archived_count"],
            r["token_total"],
            self.dialect.datetime(r["created_at"]),
            self.dialect.datetime(r["recorded_at"]),
            r["event_type"],
        )

    def session_keys(
        self, tenant: str, prefix: str, after: str | None, limit: int,
        exclude_cleared: bool = False, order: str = KEY_ORDER,
    ) -> list[str]:  # fmt: skip
        cleared = NOT_CLEARED if exclude_cleared else ""
        bound = prefix_upper_bound(prefix)
        upper, below = ((), "") if bound is None else ((bound,), " AND session_key < ?")
        start: tuple[str, ...]
        if order == KEY_ORDER:
            since, start, by = " AND session_key > ?", (after or "",), "session_key"
        else:  # the order they were made in: the (tenant, created_at, session_key) index
            since, start, by = "", (), "created_at, session_key"
            if after is not None:
                since, start = CREATED_AFTER, (tenant, after)
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                f"SELECT session_key FROM ledger_sessions s WHERE tenant = ?{since} "
                f"AND session_key >= ?{below} AND substr(session_key, 1, ?) = ?"
                f"{cleared} ORDER BY {by} LIMIT ?",
                (tenant, *start, prefix, *upper, len(prefix), prefix, limit),
            )
        return [r["session_key"] for r in rows]

    def prior_write(
        self, session_id: uuid.UUID, write_id: str, since: int | None = None
    ) -> PriorWrite | None:
        # Only callers' keys (which carry their request's digest) are indexed: the ids the
        # ledger makes are looked for among the few versions a write may have taken.
        where, params = (
            ("request_digest IS NOT NULL", ()) if since is None else ("version >= ?", (since,))
        )
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                "SELECT request_digest, version, message_count FROM ledger_timeline "
                f"WHERE session_id = ? AND idempotency_key = ? AND {where}",
                (self.dialect.sid(session_id), write_id, *params),
            )
        if not rows:
            return None
        return PriorWrite(rows[0]["request_digest"], rows[0]["version"], rows[0]["message_count"])

    def stored_chain(
        self, session_id: uuid.UUID, after_version: int, limit: int
    ) -> list[tuple[int, bytes | None]]:
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                "SELECT version, chain FROM ledger_timeline WHERE session_id = ? AND version > ? "
                "ORDER BY version LIMIT ?",
                (self.dialect.sid(session_id), after_version, limit),
            )
        return [(r["version"], None if r["chain"] is None else bytes(r["chain"])) for r in rows]

    def all_sessions(self, after: tuple[str, str] | None, limit: int) -> list[tuple[str, str]]:
        tenant, key = after or ("", "")
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                "SELECT tenant, session_key FROM ledger_sessions WHERE tenant > ? "
                "OR (tenant = ? AND session_key > ?) ORDER BY tenant, session_key LIMIT ?",
                (tenant, tenant, key, limit),
            )
        return [(r["tenant"], r["session_key"]) for r in rows]

    def session_count(self) -> int:
        with self.dialect.reading() as read:
            rows = read.tuples("SELECT count(*) FROM ledger_sessions", ())
        return int(rows[0][0])

    def tenants(self) -> list[str]:
        """Every tenant that has a session (read from the (tenant, key) index)."""
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read, "SELECT DISTINCT tenant FROM ledger_sessions ORDER BY 1", ()
            )
        return [r["tenant"] for r in rows]

    def tenant_heads(
        self, tenant: str, after: str | None, limit: int
    ) -> list[tuple[str, int, bytes | None]]:
        """(key, version, stored chain head) of a tenant's sessions after key `after`, in
        key order: what a checkpoint signs. The head is the newest timeline row's."""
        with self.dialect.reading() as read:
            rows = self.rows.fetch(
                read,
                "SELECT s.session_key, t.version, t.chain FROM ledger_sessions s "
                "JOIN ledger_timeline t ON t.session_id = s.session_id "
                "WHERE s.tenant = ? AND s.session_key > ? AND t.version = "
                "(SELECT max(m.version) FROM ledger_timeline m WHERE m.session_id = s.session_id) "
                "ORDER BY s.session_key LIMIT ?",
                (tenant, after or "", limit),
            )
        return [
            (r["session_key"], r["version"], None if r["chain"] is None else bytes(r["chain"]))
            for r in rows
        ]
