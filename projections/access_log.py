"""The access log: who read or exported what, per tenant, append-only and hash-chained.

One row per access in `ledger_access_log`, numbered 1, 2, ... per tenant, chained from
h_0 = 32 zero bytes as access_chain.py says.

An append reads the tenant's last row and inserts the next; two appends that race for a
number collide on the primary key and the loser reads again, so the log never forks.
`verify_access_log` recomputes the chain from the rows alone.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import asdict, replace
from datetime import UTC, datetime
from typing import Any

from eventsourcing.persistence import IntegrityError

from session_ledger.domain.errors import LedgerError
from session_ledger.domain.integrity import GENESIS
from session_ledger.domain.ports import AccessEntry, EvidenceStore

from .access_chain import access_step
from .dialect import SQLStore

APPEND_RETRIES = 100  # appends that lost the race for a number, before giving up
LOG_READ = "access log"  # the action of a read of the access log itself
COLUMNS = "tenant, seq, recorded_at, actor, role, action, session_key, parameters, records, chain"


def next_hash(previous: bytes, entry: AccessEntry) -> bytes:
    return access_step(previous, asdict(entry))


def record_access(
    views: SQLStore,
    tenant: str,
    actor: str,
    role: str,
    action: str,
    session_key: str | None,
    parameters: dict[str, Any],
    records: int,
    now: datetime | None = None,
) -> AccessEntry:
    """Append one access to the tenant's log: the entry as stored, with its hash."""
    entry = AccessEntry(tenant, 0, (now or datetime.now(UTC)).astimezone(UTC).isoformat(),
                        actor, role, action, session_key, parameters, records)  # fmt: skip
    for _ in range(APPEND_RETRIES):
        try:
            with views.dialect.appending() as cursor:
                read = views.dialect.reader(cursor)
                last = read("SELECT seq, chain FROM ledger_access_log WHERE tenant = ? "
                            "ORDER BY seq DESC LIMIT 1", (tenant,))  # fmt: skip
                seq, previous = (last[0]["seq"], bytes(last[0]["chain"])) if last else (0, GENESIS)
                entry = replace(entry, seq=seq + 1)
                h = next_hash(previous, entry)
                views.dialect.execute(
                    cursor, f"INSERT INTO ledger_access_log ({COLUMNS}) "
                    "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (tenant, entry.seq, entry.recorded_at, actor, role, action, session_key,
                     json.dumps(parameters, sort_keys=True, ensure_ascii=False), records, h),
                )  # fmt: skip
            return replace(entry, chain=h.hex())
        except IntegrityError:
            continue  # another process took this number: read the new last row
    raise LedgerError(f"the access log of tenant {tenant!r} is too busy to append to")


def access_entries(views: SQLStore, tenant: str, after: int, limit: int) -> list[AccessEntry]:
    """The tenant's log after number `after`, oldest first."""
    with views.dialect.reading() as read:
        rows = read(f"SELECT {COLUMNS} FROM ledger_access_log WHERE tenant = ? AND seq > ? "
                    "ORDER BY seq LIMIT ?", (tenant, after, limit))  # fmt: skip
    return _entries(rows)


def others_follow(views: SQLStore, tenant: str, after: int, reader: str) -> bool:
    """Whether the tenant's log holds an entry after number `after` other than `reader`'s
    own reads of the log: those alone are no reason for it to read on (each read is
    entered, so a reader paging one entry at a time would never reach the end)."""
    with views.dialect.reading() as read:
        found = read("SELECT seq FROM ledger_access_log WHERE tenant = ? AND seq > ? AND "
                     "(actor <> ? OR action <> ?) ORDER BY seq LIMIT 1",
                     (tenant, after, reader, LOG_READ))  # fmt: skip
    return bool(found)


def session_entries(
    views: SQLStore, tenant: str, key: str, after: int, up_to: int, limit: int
) -> list[tuple[AccessEntry, bytes]]:
    """The entries about session `key` numbered in (after, up_to], oldest first, each with
    the hash of the entry before it (what an export needs to show each link)."""
    columns = ", ".join(f"a.{c.strip()}" for c in COLUMNS.split(","))
    with views.dialect.reading() as read:
        rows = read(
            f"SELECT {columns}, p.chain AS previous FROM ledger_access_log a"
            " LEFT JOIN ledger_access_log p ON p.tenant = a.tenant AND p.seq = a.seq - 1"
            " WHERE a.tenant = ? AND a.session_key = ? AND a.seq > ? AND a.seq <= ?"
            " ORDER BY a.seq LIMIT ?", (tenant, key, after, up_to, limit),
        )  # fmt: skip
    return [(entry, GENESIS if row["previous"] is None else bytes(row["previous"]))
            for entry, row in zip(_entries(rows), rows, strict=True)]  # fmt: skip


def _entries(rows: list[Any]) -> list[AccessEntry]:
    return [
        AccessEntry(
            r["tenant"],
            r["seq"],
            r["recorded_at"],
            r["actor"],
            r["role"],
            r["action"],
            r["session_key"],
            json.loads(r["parameters"]),
            r["records"],
            bytes(r["chain"]).hex(),
        )
        for r in rows
    ]


def access_head(views: SQLStore, tenant: str) -> tuple[int, bytes]:
    """The tenant's log as it stands: (number of its last entry, its hash), (0, h_0) if empty."""
    with views.dialect.reading() as read:
        last = read("SELECT seq, chain FROM ledger_access_log WHERE tenant = ? "
                    "ORDER BY seq DESC LIMIT 1", (tenant,))  # fmt: skip
    return (last[0]["seq"], bytes(last[0]["chain"])) if last else (0, GENESIS)


def verify_access_log(
    views: EvidenceStore, tenant: str, page: int = 1000, pinned: Mapping[int, bytes] | None = None
) -> Iterator[str]:
    """Problems found recomputing the tenant's access chain (none: intact); given
    `pinned` (entry number -> the hash a signed checkpoint recorded there), the chain
    recomputed from the entries must pass through each, so a log cut short or rewritten
    and rehashed since the checkpoint is named."""
    pins = dict(pinned or {})
    h, seq = GENESIS, 0
    while entries := views.access_entries(tenant, seq, page):
        for entry in entries:
            if entry.seq != seq + 1:
                yield f"entry {seq + 1} is missing"
                return
            h = next_hash(h, entry)
            if entry.chain != h.hex():
                yield (
                    f"entry {entry.seq}: the stored hash is {entry.chain}, the entries give "
                    + h.hex()
                )
                return
            if entry.seq in pins and pins.pop(entry.seq) != h:
                yield (f"rewritten at or before entry {entry.seq}: the entries give "
                       f"{h.hex()}, the checkpoint recorded another hash")  # fmt: skip
                return
            seq = entry.seq
    if pins.pop(0, GENESIS) != GENESIS:
        yield "the checkpoint recorded an empty log with a hash other than h_0"
    if pins:
        yield (f"cut short: the log ends at entry {seq}; the checkpoint recorded entry "
               f"{max(pins)}")  # fmt: skip
