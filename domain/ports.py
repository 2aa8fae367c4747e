"""What the ledger needs from its store's views, and the values they exchange.

The projections package implements `SessionViews` on each backend; the ledger only
knows this protocol, so the domain imports nothing from the layers above it.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple, Protocol, TypeVar, runtime_checkable

from eventsourcing.persistence import IntegrityError

from .messages import ChatMessage
from .tokens import NamedTokenizer, TokenCount

T = TypeVar("T")
ACTIVE = "active"
ARCHIVED = "archived"
STATUSES = (ACTIVE, ARCHIVED)
# The orders session keys are listed in: by key, or in the order the sessions were made
# (their first write; LlamaIndex's SimpleChatStore lists its keys so).
KEY_ORDER = "key"
CREATED_ORDER = "created"
KEY_ORDERS = (KEY_ORDER, CREATED_ORDER)


class OutcomeUnknown(IntegrityError):
    """The store refused a write on a later try, after an earlier try's answer was lost:
    the refusal may be the earlier try's own row, so the write may be stored. (An
    IntegrityError on the store's first try means it stored nothing: another writer
    took its version.)"""


@dataclass(frozen=True)
class WriteResult:
    """What a write did: the session's version and message count after it."""

    version: int
    message_count: int
    replayed: bool = False  # True when an idempotent retry returned the first result
    removed: tuple[ChatMessage, ...] = ()


@dataclass(frozen=True)
class SessionHead:
    """A session's current position: version, counts and times."""

    tenant: str
    key: str
    version: int
    message_count: int
    archived_count: int
    token_total: int
    created_at: datetime
    updated_at: datetime
    last_event: str  # e.g. "HistoryCleared": a reset session reads as absent to LlamaIndex


@dataclass(frozen=True)
class AuditEntry:
    """One event of a session's stream, for the audit trail: who changed what, when."""

    version: int
    event_type: str
    recorded_at: datetime
    actor: str
    reason: str | None
    idempotency_key: str | None
    changes: dict[str, Any]  # what the event did, e.g. {"added": [...]} or {"removed": [...]}


@dataclass(frozen=True)
class ChainReport:
    """What `verify` found for one session: its hash chain recomputed from the stored
    events and compared with the hashes stored when they were written."""

    tenant: str
    key: str
    versions: int  # events that checked out (up to the first bad one)
    head: str | None  # hex h_v of the last of them, as recomputed
    first_bad_version: int | None  # None: intact
    problem: str | None
    # The events checked out as far as hashes were kept: the views lack the rest, which a
    # rebuild derives (a store written before hashes were kept, or its views lost).
    derivable: bool = False

    @property
    def intact(self) -> bool:
        return self.first_bad_version is None


@dataclass(frozen=True)
class PriorWrite:
    """The write an idempotency key was first used for."""

    request_digest: str
    version: int
    message_count: int


@dataclass(frozen=True)
class StreamView:
    """A stream as its events left it: its text so far, and how it ended."""

    stream_id: str
    role: str
    turn: str | None
    parent: str | None
    state: str  # open, completed, aborted
    text: str
    opened_version: int
    ended_version: int | None
    cause: str | None  # why it was aborted
    updated_at: datetime  # its last event


class FeedRow(NamedTuple):
    """One event of the tenant feed: its position in the feed, its session, its version."""

    position: str
    session_id: uuid.UUID
    key: str
    version: int


@dataclass(frozen=True)
class FeedScan:
    """What one read of the tenant feed found: the tenant's events in feed order, and the
    position past every event it looked at (other tenants' too)."""

    rows: list[FeedRow]
    position: str
    more: bool  # the scan stopped at its limit: read on at once
    held_back: bool  # later events wait for an older transaction to end: look again soon


class WriteBatch(NamedTuple):
    """One write's new events and what the views need beside them (same transaction); a
    named tuple, as every write builds one."""

    session_id: uuid.UUID
    tenant: str
    key: str
    events: tuple[Any, ...]
    first_message_id: int  # the id the first new message gets
    message_count: int  # active messages after the write
    archived_count: int  # archived messages after the write
    next_message_id: int  # the id the next message will get, after the write
    counts: Sequence[TokenCount]  # per message of an append or a replace
    bodies: tuple[str, ...] = ()  # their canonical JSON, when the writer already has it


class MessagesRead(Protocol):
    """Messages as one read of a view found them, with the session's version it read (0:
    the session does not exist), so an answer and its version never disagree."""

    version: int
    # A page of the history that others follow: where the next starts (the `after` of
    # `SessionViews.history_page`, of the same version). None: the last page, or no page.
    next_after: int | None

    def messages(self) -> list[ChatMessage]:
        """The messages, decoded."""
        ...

    def json(self) -> list[str]:
        """Each message's canonical JSON (`ChatMessage.to_json()`), made without decoding."""
        ...

    def decoded(
        self, text: Callable[[str, str], T], whole: Callable[[dict[str, Any]], T]
    ) -> list[T]:
        """The messages as the caller makes them, no `ChatMessage` between: `text(role,
        text)` of a message of one text block and nothing else, `whole(d)` of any other
        (`d` its `to_dict()`, to keep)."""
        ...

    def dicts(self) -> list[dict[str, Any]]:
        """Each message's `to_dict()` (LlamaIndex's JSON shape), made as it is decoded."""
        ...

    def __len__(self) -> int: ...


class ReadRouting(Protocol):
    """Where the queries are served when the store keeps copies of the views that may
    trail it (PostgreSQL standbys). A query is a function of the views it runs on."""

    def read(
        self, session_id: uuid.UUID | None, min_version: int, query: Callable[[SessionViews], T],
        version: Callable[[T], int] | None = None,
    ) -> T:  # fmt: skip
        """`query` run on a copy where the session (if any) is at `min_version` or past it,
        and past every version this process wrote of it; else on the views themselves.
        `version`: the session's version a result of `query` shows (a read of the session
        now), so a result new enough needs no check of the copy first."""
        ...


@dataclass(frozen=True)
class AccessEntry:
    """One entry of a tenant's access log: who read or exported what."""

    tenant: str
    seq: int
    recorded_at: str  # ISO 8601, UTC
    actor: str
    role: str
    action: str  # transcript, window, audit, export, ...
    session_key: str | None
    parameters: dict[str, Any]
    records: int  # messages, events or lines the answer held
    chain: str = ""  # hex h_seq


@dataclass(frozen=True)
class FoundEvent:
    """An event an audit search found."""

    key: str
    version: int
    event_type: str
    recorded_at: datetime
    actor: str
    reason: str | None


class EvidenceStore(Protocol):
    """The evidence kept beside the views: each tenant's access log (append-only,
    hash-chained), the audit search's index of the timeline, the tenants' session heads
    (what a checkpoint signs) and the sizes of the stored events (an export's pages)."""

    def record_access(
        self, tenant: str, actor: str, role: str, action: str, session_key: str | None,
        parameters: dict[str, Any], records: int, now: datetime | None = None,
    ) -> AccessEntry: ...  # fmt: skip

    def access_entries(self, tenant: str, after: int, limit: int) -> list[AccessEntry]: ...

    def others_follow(self, tenant: str, after: int, reader: str) -> bool: ...

    def session_entries(
        self, tenant: str, key: str, after: int, up_to: int, limit: int
    ) -> list[tuple[AccessEntry, bytes]]: ...

    def access_head(self, tenant: str) -> tuple[int, bytes]: ...

    def search_events(
        self, tenant: str, *, actor: str | None = None, event_type: str | None = None,
        start: datetime | None = None, end: datetime | None = None, prefix: str = "",
        cursor: str | None = None, limit: int = 100,
    ) -> tuple[list[FoundEvent], str | None]: ...  # fmt: skip

    def tenants(self) -> list[str]: ...

    def tenant_heads(
        self, tenant: str, after: str | None, limit: int
    ) -> list[tuple[str, int, bytes | None]]: ...

    def event_sizes(
        self, session_id: uuid.UUID, after: int, upto: int, limit: int
    ) -> list[int]: ...


@runtime_checkable
class SessionViews(Protocol):
    """Reads the ledger serves from its projections."""

    # Where the queries may be served instead of here (None: here).
    read_routing: ReadRouting | None
    # The evidence beside these views (the second port).
    evidence: EvidenceStore
    # Told each session id and its tenant once its write committed (the live tails' hub
    # subscribes while it runs; None: no one).
    after_commit: Callable[[uuid.UUID, str], None] | None

    def context_window(
        self,
        session_id: uuid.UUID,
        token_limit: int,
        initial_token_count: int,
        tokenizer: NamedTokenizer | None,
        version: int | None = None,
        max_bytes: int | None = None,
        counted_by: NamedTokenizer | None = None,
    ) -> MessagesRead:
        """The window (`ChatMemoryBuffer.get`) now, or at `version`; AnswerTooLarge if its
        bodies hold more than `max_bytes`, found before they are read. `tokenizer`: count
        by it; None: by the stored counts, which `counted_by` made."""
        ...

    def history(
        self,
        session_id: uuid.UUID,
        status: str,
        offset: int,
        limit: int | None,
        version: int | None = None,
        last: int | None = None,
    ) -> MessagesRead:
        """A page of the history of `status` now, or at `version`; with `last` (offset 0),
        its newest `last` messages in order (the first `limit` of them), read newest first."""
        ...

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
    ) -> MessagesRead:
        """Up to `limit` messages of `status` now, or at `version`, from `offset`, after
        the position `after` (a page's `next_after`) or from the `last`-th newest, ending
        before their bodies pass `max_bytes` (the first whatever its size); bodies are
        read only for the page."""
        ...

    def version_at(self, session_id: uuid.UUID, when: datetime) -> int | None: ...

    def ended_at(self, session_id: uuid.UUID, version: int) -> list[tuple[str, ChatMessage]]: ...

    def message_at(
        self, session_id: uuid.UUID, position: int, count: int
    ) -> tuple[int, ChatMessage] | None:
        """(message id, message) of the active message at `position` of `count`."""
        ...

    def session_head(
        self, session_id: uuid.UUID, version: int | None = None
    ) -> SessionHead | None: ...

    def session_keys(
        self, tenant: str, prefix: str, after: str | None, limit: int,
        exclude_cleared: bool = False, order: str = KEY_ORDER,
    ) -> list[str]:  # fmt: skip
        """A page of a tenant's keys in `order`, after the key `after` (in that order)."""
        ...

    def prior_write(
        self, session_id: uuid.UUID, write_id: str, since: int | None = None
    ) -> PriorWrite | None:
        """The committed write of this id: a caller's idempotency key (`since` None), or
        any write id among the versions from `since` on."""
        ...

    def stored_chain(
        self, session_id: uuid.UUID, after_version: int, limit: int
    ) -> list[tuple[int, bytes | None]]: ...  # (version, h_v as stored), in version order

    def sealed(self, session_id: uuid.UUID) -> bool:
        """Whether the session's content is stored sealed under a data key of its own."""
        ...

    def keyed_digest(self, digest: str) -> str:
        """A keyed write's request digest (its SHA-256) as stored: keyed under the master
        key when one is configured, so that it confirms no guess of the content."""
        ...

    def same_request(self, stored: str | None, digest: str) -> bool:
        """Whether a stored request digest is that of the request whose SHA-256 is
        `digest` (keyed or plain)."""
        ...

    def can_seal(self) -> bool:
        """Whether a master key is configured (new sessions are sealed)."""
        ...

    def all_sessions(
        self, after: tuple[str, str] | None, limit: int
    ) -> list[tuple[str, str]]: ...  # (tenant, key) in order, after `after`

    def stream_view(self, session_id: uuid.UUID, stream_id: str) -> StreamView | None: ...

    def feed_position(self) -> str:
        """The tenant feed's position now: a read from it sees what commits later."""
        ...

    def feed_after(self, tenant: str, prefix: str, position: str, limit: int) -> FeedScan:
        """The tenant's events among the next `limit` of the feed after `position`."""
        ...

    def idle_streams(self, before: datetime, limit: int) -> list[tuple[str, str, str]]:
        """(tenant, key, stream id) of open streams with no event since `before`."""
        ...

    def session_count(self) -> int: ...

    def drop_old_bytes(self) -> str:
        """Drop what the store's files keep of rows rewritten in place (encrypt-existing);
        what was done, or what the operator must do."""
        ...

    def drop_erased_keys(self) -> bool:
        """After an erasure committed: drop what the store's files keep of the deleted
        data key rows (SQLite: its WAL emptied; PostgreSQL: the key table vacuumed);
        false when a reader kept the WAL from being emptied."""
        ...

    def last_event_position(self) -> int:
        """The position of the newest event in the whole log (the live tails' watcher)."""
        ...

    def events_written_after(self, position: int, limit: int) -> list[tuple[int, uuid.UUID, str]]:
        """(position, session id, tenant) of the events after `position`, in log order."""
        ...
