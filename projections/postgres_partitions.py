"""Hash partitioning of the PostgreSQL tables by session id (docs/operations.md).

`migrate --partitions N` gives the events table and the views kept per session N hash
partitions each, so every index stays the size of one partition's rows and vacuum works
partition by partition. A read names its session, so the planner (or the executor, for a
prepared generic plan) prunes it to one partition. A table already partitioned N ways
is left alone; any other (unpartitioned, or partitioned another number of ways) is
copied into the new layout in the caller's transaction, with the same name, columns,
primary key, indexes and storage options. The copy holds writers off; run it with the
servers stopped, as any `migrate` that moves a layout.

Primary keys on a partitioned table must hold the partition key: every key here starts
with the session id. A unique index without it cannot be kept unique: the events' index
of notification ids becomes a plain one (its sequence alone keeps the ids unique). The
session table (unique by tenant and key) and the data keys (one row per session) stay
single tables.
"""

from __future__ import annotations

from typing import Any

from session_ledger.domain.errors import InvalidInput

# table -> its partition key (the session's id)
PARTITIONED_TABLES = {
    "ledger_events": "originator_id",
    "ledger_messages": "session_id",
    "ledger_ended_messages": "session_id",
    "ledger_timeline": "session_id",
    "ledger_streams": "session_id",
}
MAX_PARTITIONS = 1024

_INDEXES = (
    "SELECT pg_get_indexdef(i.indexrelid), i.indisunique,"
    " (SELECT attnum FROM pg_attribute WHERE attrelid = i.indrelid AND attname = %s)"
    " = ANY(i.indkey::int2[])"
    " FROM pg_index i WHERE i.indrelid = %s::regclass"
    " AND NOT EXISTS (SELECT 1 FROM pg_constraint c WHERE c.conindid = i.indexrelid)"
    " ORDER BY i.indexrelid"
)
_CONSTRAINTS = (
    "SELECT conname, pg_get_constraintdef(oid) FROM pg_constraint"
    " WHERE conrelid = %s::regclass AND contype IN ('p', 'u') ORDER BY oid"
)
_SEQUENCES = (
    "SELECT a.attname, pg_get_serial_sequence(%s, a.attname) FROM pg_attribute a"
    " WHERE a.attrelid = %s::regclass AND a.attnum > 0 AND NOT a.attisdropped"
    " AND pg_get_serial_sequence(%s, a.attname) IS NOT NULL"
)
# A partitioned table keeps no storage options of its own: its partitions do.
_OPTIONS = (
    "SELECT coalesce(c.reloptions, (SELECT p.reloptions FROM pg_inherits h"
    " JOIN pg_class p ON p.oid = h.inhrelid WHERE h.inhparent = c.oid LIMIT 1))"
    " FROM pg_class c WHERE c.oid = %s::regclass"
)


def partition_counts(c: Any) -> dict[str, int]:
    """Each partitionable table's number of hash partitions (0: a single table); tables
    not made yet are left out."""
    counts: dict[str, int] = {}
    for table in PARTITIONED_TABLES:
        c.execute(
            "SELECT c.relkind::text, (SELECT count(*) FROM pg_inherits h"
            " WHERE h.inhparent = c.oid) FROM pg_class c WHERE c.oid = to_regclass(%s)",
            (table,),
        )
        row = _values(c.fetchone())
        if row:
            counts[table] = int(row[1]) if row[0] == "p" else 0
    return counts


def partition(c: Any, partitions: int) -> list[str]:
    """Make each partitionable table `partitions` hash partitions by session id, copying
    the rows of those laid out otherwise; returns the tables copied."""
    if not 2 <= partitions <= MAX_PARTITIONS:
        raise InvalidInput(f"partitions must be between 2 and {MAX_PARTITIONS}, not {partitions}")
    moving = [t for t, n in partition_counts(c).items() if n != partitions]
    if moving:
        c.execute(f"LOCK TABLE {', '.join(moving)} IN EXCLUSIVE MODE")
    for table in moving:
        _repartition(c, table, PARTITIONED_TABLES[table], partitions)
    return moving


def _repartition(c: Any, table: str, key: str, partitions: int) -> None:
    """Copy `table` into a new one hash-partitioned by `key`, which then takes its
    name, sequences, keys and indexes."""
    c.execute(_INDEXES, (key, table))
    indexes = [_index(*_values(r)) for r in c.fetchall()]
    c.execute(_CONSTRAINTS, (table,))
    constraints = [_values(r) for r in c.fetchall()]
    c.execute(_SEQUENCES, (table, table, table))
    sequences = [_values(r) for r in c.fetchall()]
    c.execute(_OPTIONS, (table,))
    options = _values(c.fetchone())[0]
    storage = f" WITH ({', '.join(options)})" if options else ""
    new = f"{table}_repartitioned"
    c.execute(f"CREATE TABLE {new} (LIKE {table} INCLUDING DEFAULTS) PARTITION BY HASH ({key})")
    for remainder in range(partitions):
        c.execute(
            f"CREATE TABLE {new}_{remainder} PARTITION OF {new}"
            f" FOR VALUES WITH (MODULUS {partitions}, REMAINDER {remainder}){storage}"
        )
    c.execute(f"INSERT INTO {new} SELECT * FROM {table}")
    for _, sequence in sequences:  # else the old table's drop takes it along
        c.execute(f"ALTER SEQUENCE {sequence} OWNED BY NONE")
    c.execute(f"DROP TABLE {table}")
    c.execute(f"ALTER TABLE {new} RENAME TO {table}")
    for remainder in range(partitions):
        c.execute(f"ALTER TABLE {new}_{remainder} RENAME TO {table}_p{remainder}")
    for column, sequence in sequences:
        c.execute(f"ALTER SEQUENCE {sequence} OWNED BY {table}.{column}")
    for name, definition in constraints:
        c.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    for statement in indexes:
        c.execute(statement)
    c.execute(f"ANALYZE {table}")


def _index(definition: str, unique: bool, has_key: bool) -> str:
    # A partitioned table's index reads `ON ONLY t`: made so, it would index no partition.
    definition = definition.replace(" ON ONLY ", " ON ", 1)
    if unique and not has_key:
        return definition.replace("CREATE UNIQUE INDEX", "CREATE INDEX", 1)
    return definition


def _values(row: Any) -> Any:
    if row is None:
        return None
    return tuple(row.values()) if isinstance(row, dict) else tuple(row)
