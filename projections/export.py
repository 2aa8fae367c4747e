"""Compliance export of one session, streamed, and the offline verifier of the export.

JSONL (`export_jsonl`), one JSON object per line, UTF-8, each line ending in `\\n`:
  1. header: `{"record": "header", "format": "session-ledger-export", "format_version": 1,
     "chain": "sha256-v1", "tenant", "key", "session_id", "exported_at", "as_of_version",
     "to_version"}`;
  2. one `{"record": "event", ...}` per stored event, versions 1 to `to_version` in order:
     `version`, `type`, `recorded_at`, `actor`, `reason`, `idempotency_key`, `payload`
     (the event's own fields: the messages appended, the `kept` count of a set, the
     removed message, ...), then the stored record itself, `topic` and `state` (base64 of
     the exact stored bytes), `state_sha256` and `chain` (hex of h_v, domain/integrity.py);
  3. asked for (`access_log`), one `{"record": "access", "seq", "recorded_at", "actor",
     "role", "action", "session_key", "parameters", "records", "previous", "chain"}` per
     entry of the tenant's access log about this session, numbered up to the header's
     `access_log_entries` (the log's length when the export began): who read or exported
     it, each with the hash of the entry before it and its own (access_chain.py);
  4. trailer: `{"record": "trailer", "events", "chain_head", "sha256"}` (and
     `access_entries`, their count, when asked for), where `sha256` is the SHA-256 of
     every byte of the file before the trailer line.
When the tenant has a signed checkpoint that lists the session at a version the export
reaches, a line `{"record": "checkpoint", "tree_head", "signature", "leaf_index",
"version", "head", "path"}` follows the header: the checkpoint's signed tree head and the
Merkle path of the session's leaf (projections/checkpoint.inclusion_proof), so the file
alone proves the session belongs to the signed state.
CSV (`export_csv`): the history at the exported version, one row per message.

Both read a page of events (or messages) at a time up to a version fixed when the
export starts, so memory stays flat however long the session is, and writers that go
on meanwhile change nothing in it. `verify_export` recomputes everything from the
file alone, line by line, and names the first line that does not hold.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from eventsourcing.persistence import Mapper, StoredEvent

from session_ledger.domain.errors import InvalidInput, LedgerError
from session_ledger.domain.integrity import GENESIS, chain_step
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import ACTIVE
from session_ledger.domain.reads import past_version
from session_ledger.domain.session import session_id as derive_session_id

from .export_format import CHAIN, FORMAT, FORMAT_VERSION, json_text, line, readable, utc
from .sealing import SealingMapper

FORMATS = ("jsonl", "csv")
EVENTS_PAGE = 500  # stored events per read
MESSAGES_PAGE = 500  # history rows per read (CSV)
CSV_CHUNK_CHARS = 64 * 1024  # CSV rows are sent once this much text is written
CSV_COLUMNS = ("position", "role", "content", "blocks", "additional_kwargs")


@dataclass(frozen=True)
class ExportPlan:
    """What one export covers: a session, from version 1 to `to_version`."""

    tenant: str
    key: str
    session_id: uuid.UUID
    to_version: int
    as_of_version: int | None
    access_up_to: int | None = None  # carry the access log's entries numbered up to this


def plan_export(
    ledger: Ledger, key: str, *, tenant: str | None = None, as_of_version: int | None = None,
    access_log: bool = False,
) -> ExportPlan:  # fmt: skip
    """The session and version an export covers (and, with `access_log`, how much of the
    access log); SessionNotFound, StateNotFound or InvalidInput before anything is written."""
    head = ledger.head(key, tenant=tenant)
    if as_of_version is not None:
        past_version(key, head, as_of_version)
    up_to = None
    if access_log:
        up_to = ledger.views.evidence.access_head(head.tenant)[0]
    return ExportPlan(
        tenant=head.tenant,
        key=head.key,
        session_id=derive_session_id(head.tenant, head.key),
        to_version=as_of_version or head.version,
        as_of_version=as_of_version,
        access_up_to=up_to,
    )


def export_session(
    ledger: Ledger,
    key: str,
    *,
    tenant: str | None = None,
    format: str = "jsonl",
    as_of_version: int | None = None,
    checkpoint_dir: Path | None = None,
    access_log: bool = False,
) -> Iterator[bytes]:
    """The export of one session as chunks of bytes. Every refusal (unknown session or
    version, bad format) is raised by this call, before the first chunk. A JSONL export
    carries the inclusion proof of the newest checkpoint in `checkpoint_dir`, if any, and
    with `access_log` the access log's entries about the session."""
    if format not in FORMATS:
        raise InvalidInput(f"format must be one of {', '.join(FORMATS)}; got {format!r}")
    plan = plan_export(ledger, key, tenant=tenant, as_of_version=as_of_version,
                       access_log=access_log and format == "jsonl")  # fmt: skip
    if format == "csv":
        return export_csv(ledger, plan)
    return export_jsonl(ledger, plan, proof=plan_proof(plan, checkpoint_dir))


def plan_proof(plan: ExportPlan, checkpoint_dir: Path | None) -> dict[str, Any] | None:
    """The inclusion proof an export of `plan` carries (None: no checkpoint covers it)."""
    if checkpoint_dir is None:
        return None
    from .checkpoint import inclusion_proof

    return inclusion_proof(checkpoint_dir, plan.tenant, plan.key, plan.to_version)


def stored_events(
    ledger: Ledger, plan: ExportPlan, page: int = EVENTS_PAGE
) -> Iterator[StoredEvent]:
    """The session's stored events, versions 1 to `plan.to_version`, `page` per read, and
    a read ending before `max_answer_bytes` of them (its first whatever its size): a few
    writes of tens of megabytes each are read one at a time."""
    evidence = ledger.views.evidence
    after = 0
    while after < plan.to_version:
        sizes = evidence.event_sizes(plan.session_id, after, plan.to_version, page)
        held, upto = 0, after
        for size in sizes:
            if upto > after and held + size > ledger.limits.max_answer_bytes:
                break
            held, upto = held + size, upto + 1
        rows = ledger.recorder.select_events(
            plan.session_id, gt=after, lte=upto if sizes else plan.to_version, limit=page
        )
        for stored in rows:
            if stored.originator_version != after + 1:
                raise LedgerError(
                    f"session {plan.key!r}: version {after + 1} is missing from the event log"
                )
            after = stored.originator_version
            yield stored
        if not rows:
            raise LedgerError(
                f"session {plan.key!r}: the event log ends at version {after}, before "
                f"{plan.to_version}"
            )


def export_jsonl(
    ledger: Ledger,
    plan: ExportPlan,
    *,
    page: int = EVENTS_PAGE,
    now: datetime | None = None,
    proof: dict[str, Any] | None = None,
) -> Iterator[bytes]:
    """The JSONL export, one line (bytes, `\\n`-terminated) per item."""
    digest = hashlib.sha256()

    def hashed(line: bytes) -> bytes:
        digest.update(line)
        return line

    yield hashed(line({
        "record": "header", "format": FORMAT, "format_version": FORMAT_VERSION, "chain": CHAIN,
        "tenant": plan.tenant, "key": plan.key, "session_id": str(plan.session_id),
        "exported_at": utc(now or datetime.now(UTC)), "as_of_version": plan.as_of_version,
        "to_version": plan.to_version,
        **({} if plan.access_up_to is None else {"access_log_entries": plan.access_up_to}),
    }))  # fmt: skip
    if proof is not None:
        yield hashed(line({"record": "checkpoint", **proof}))
    head, count = GENESIS, 0
    for stored in stored_events(ledger, plan, page):
        state = bytes(stored.state)
        version = stored.originator_version
        head = chain_step(head, plan.session_id, version, stored.topic, state)
        count += 1
        event, openings = opened(ledger.mapper, stored)
        yield hashed(line({
            "record": "event", "version": version, **readable(stored.topic, vars(event)),
            "topic": stored.topic, "state": base64.b64encode(state).decode("ascii"),
            "state_sha256": hashlib.sha256(state).hexdigest(), "chain": head.hex(),
            **({"openings": openings} if openings else {}),
        }))  # fmt: skip
    access = 0
    for entry_line in access_lines(ledger, plan, page):
        access += 1
        yield hashed(entry_line)
    counted = {} if plan.access_up_to is None else {"access_entries": access}
    yield line({"record": "trailer", "events": count, "chain_head": head.hex(), **counted,
                "sha256": digest.hexdigest()})  # fmt: skip


def opened(mapper: Mapper[uuid.UUID], stored: StoredEvent) -> tuple[Any, dict[str, str]]:
    """The stored event decoded, its sealed fields opened, and their salts (encryption at
    rest: what proves the opened content against the commitments the chain covers)."""
    if isinstance(mapper, SealingMapper):
        return mapper.opened_event(stored)
    return mapper.to_domain_event(stored), {}


def access_lines(ledger: Ledger, plan: ExportPlan, page: int = EVENTS_PAGE) -> Iterator[bytes]:
    """The access entries about the session the plan asks for, a page at a time."""
    if plan.access_up_to is None:
        return
    after = 0
    while found := ledger.views.evidence.session_entries(plan.tenant, plan.key, after,
                                                         plan.access_up_to, page):  # fmt: skip
        for entry, previous in found:
            fields = {k: v for k, v in vars(entry).items() if k not in ("tenant", "chain")}
            yield line({"record": "access", **fields, "previous": previous.hex(),
                        "chain": entry.chain})  # fmt: skip
        after = found[-1][0].seq


def export_csv(ledger: Ledger, plan: ExportPlan, *, page: int = MESSAGES_PAGE) -> Iterator[bytes]:
    """The history at `plan.to_version` as CSV (RFC 4180, UTF-8): a header row, then one
    row per message: position, role, text content, blocks and additional_kwargs as JSON."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def taken() -> bytes:
        text = buffer.getvalue()
        buffer.seek(0)
        buffer.truncate()
        return text.encode("utf-8")

    writer.writerow(CSV_COLUMNS)
    yield taken()
    position, after, most = 0, None, ledger.limits.max_answer_bytes
    while True:  # pages of the history as the API answers them, sent a chunk at a time
        read = ledger.views.history_page(
            plan.session_id, ACTIVE, 0, page, most, plan.to_version, after
        )
        for m in read.messages():
            writer.writerow((position, m.role, m.content or "", json_text(list(m.blocks)),
                             json_text(m.additional_kwargs)))  # fmt: skip
            position += 1
            if buffer.tell() >= CSV_CHUNK_CHARS:
                yield taken()
        if read.next_after is None:
            if buffer.tell():
                yield taken()
            return
        after = read.next_after
