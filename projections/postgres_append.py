"""The one statement of a PostgreSQL append: the events, their message rows and the
timeline row (with the hash chain extended in SQL) as data-modifying CTEs, so the
common write is one round trip and one commit (`PostgresLedgerRecorder.insert_events`)."""

from __future__ import annotations

import functools

from .sql import LIVE_COLUMNS, SESSION_INSERT, TIMELINE_COLUMNS

MAX_VALUES_ROWS = 200
# Any number of rows in one statement: a large `set` is one round trip, not thousands
# of statements queued in psycopg's pipeline.
MESSAGES_INSERT = (
    f"INSERT INTO ledger_messages ({LIVE_COLUMNS})"
    " SELECT %s, %s, m.id, %s, m.role, m.tokens, m.joined, m.body, m.open_end FROM"
    " unnest(%s::bigint[], %s::text[], %s::integer[], %s::integer[], %s::text[], %s::boolean[])"
    " AS m(id, role, tokens, joined, body, open_end)"
)


def to_psycopg(statement: str) -> str:
    return statement.replace("?", "%s")


def _values(rows: int, row: str) -> str:
    return ", ".join([row] * rows)


def events_insert(n: int) -> str:
    return (
        "INSERT INTO ledger_events (originator_id, originator_version, topic, state) VALUES "
        + _values(n, "(%s, %s, %s, %s)")
        + " RETURNING notification_id"
    )


# h_v from the stored h_{v-1} and the record's encoding (domain/integrity.py).
CHAIN_EXTENDED = (
    "sha256((SELECT chain FROM ledger_timeline WHERE session_id = %s AND version = %s)"
    " || %s::bytea)"
)


@functools.lru_cache(maxsize=512)
def append_sql(
    n_events: int, messages: int | None, chained: bool, token_totals: tuple[str, ...]
) -> str:
    """Events, message rows (`messages` VALUES rows, or arrays when None) and one timeline
    row per SQL expression of its token total, as one statement of data-modifying CTEs,
    with the session row when the write starts the session (not `chained`). A `chained`
    write's one timeline row extends the stored hash chain in the statement itself, as
    its token total extends the stored total, so an append stays one round trip."""
    parts = [f"e AS ({events_insert(n_events)})"]
    if not chained:
        parts.append(f"s AS ({to_psycopg(SESSION_INSERT)})")
    if messages is None:
        parts.append(f"m AS ({MESSAGES_INSERT})")
    elif messages:
        row = "(%s, %s, %s, %s, %s, %s, %s, %s, %s)"
        parts.append(
            f"m AS (INSERT INTO ledger_messages ({LIVE_COLUMNS}) VALUES {_values(messages, row)})"
        )
    assert not chained or len(token_totals) == 1
    chain = CHAIN_EXTENDED if chained else "%s"
    timeline = ", ".join(
        f"({'%s, ' * 10}{chain}, %s, {to_psycopg(tokens)})" for tokens in token_totals
    )
    parts.append(f"t AS (INSERT INTO ledger_timeline ({TIMELINE_COLUMNS}) VALUES {timeline})")
    return "WITH " + ", ".join(parts) + " SELECT notification_id FROM e ORDER BY notification_id"
