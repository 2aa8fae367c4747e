"""Erasure, legal hold and retention: the commands a compliance team runs on sessions.

Erasure is crypto-shredding: a session's content is stored sealed under a data key of
its own (by the store, at the stored-event and view-row boundary), and `erase` records
a `SessionErased` event whose write destroys that key and drops the rows that held the
content, in one transaction. The events stay, so the hash chain and the audit trail
still hold; their content can no longer be opened.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from eventsourcing.application import Repository
from eventsourcing.persistence import EventStore

from .addresses import SessionAddresses
from .erasure import ERASED_EVENT
from .errors import (
    EncryptionRequired,
    HoldConflict,
    HoldNotFound,
    InvalidInput,
    LegalHold,
    SessionErasedError,
    SessionNotFound,
)
from .inputs import MAX_REASON_CHARS, check_int, check_tenant, check_text
from .ports import SessionViews, WriteResult
from .session import Session, session_id
from .session_events import UNNAMED_HOLD, holds_of
from .write_loop import WriteLoop

ENCRYPTED_EVENT = "SessionEncrypted"


_log = logging.getLogger(__name__)


@dataclass(frozen=True)
class RetentionRule:
    """Erase the sessions of `tenant` whose key starts with `prefix` once their last write
    is more than `days` days old."""

    tenant: str
    prefix: str
    days: int

    def __post_init__(self) -> None:
        check_tenant(self.tenant)
        check_text(self.prefix, "retention prefix", 512, allow_empty=True)
        check_int("retention days", self.days, least=1)

    @property
    def reason(self) -> str:
        scope = f"keys starting {self.prefix!r}" if self.prefix else "every key"
        return f"retention policy: tenant {self.tenant!r}, {scope}, {self.days} days"


def parse_retention(text: str) -> list[RetentionRule]:
    """Rules from `tenant:prefix:days` items separated by commas (the prefix may be empty
    or hold colons); InvalidInput naming the item otherwise."""
    rules = []
    for item in (part.strip() for part in text.split(",")):
        if not item:
            continue
        tenant, _, rest = item.partition(":")
        prefix, _, days = rest.rpartition(":")
        if not tenant or not days.isdigit():
            raise InvalidInput(f"retention rule {item!r} is not tenant:prefix:days")
        rules.append(RetentionRule(tenant, prefix, int(days)))
    return rules


@dataclass(frozen=True)
class RetentionAction:
    """What `apply_retention` did, or would do in a dry run, to one session."""

    tenant: str
    key: str
    last_write: datetime
    # "erase" (dry run), "erased", "held" (kept: under legal hold) or "clear" (kept:
    # stored without encryption, so it cannot be erased)
    action: str
    reason: str


@dataclass
class _Holds:
    """What hold events change of a session, folded alone."""

    holds: tuple[str, ...] = ()
    held: bool = False


class _SealedAlready(Exception):
    """A session `encrypt` finds sealed: nothing to write."""


class Compliance:
    """Erasure, holds, encryption of existing sessions and retention: commands handed to
    the write loop, and the reads of the views and events they decide on."""

    def __init__(
        self, views: SessionViews, events: EventStore[uuid.UUID],
        repository: Repository[uuid.UUID], writes: WriteLoop, addresses: SessionAddresses,
    ) -> None:  # fmt: skip
        self._views, self._events, self._repository = views, events, repository
        self._writes, self._addresses = writes, addresses

    def erase(
        self, key: str, *, reason: str, basis: str, tenant: str | None = None,
        actor: str | None = None, expected_version: int | None = None,
        idempotency_key: str | None = None,
    ) -> WriteResult:  # fmt: skip
        """Erase the session's content for good: its data key is destroyed and every view
        row that held its messages dropped, with a `SessionErased` event (who, why, on what
        legal basis, when). LegalHold if held; EncryptionRequired if its content is not
        sealed under a key of its own (no master key, or a session older than it).
        `expected_version` and `idempotency_key` as for every write."""
        check_text(reason, "reason", MAX_REASON_CHARS, allow_controls=True)
        check_text(basis, "basis", MAX_REASON_CHARS, allow_controls=True)

        def command(s: Session, audit: dict[str, Any]) -> None:
            if s.held:
                held = ", ".join(repr(r) for r in self._holds(s))
                raise LegalHold(
                    f"session {key!r} is under legal hold ({held}): release each before erasing"
                )
            if not self._views.sealed(s.id):
                raise EncryptionRequired(
                    f"session {key!r} is not stored encrypted under a key of its own, so it "
                    "cannot be erased: configure LEDGER_MASTER_KEY before sessions start"
                )
            s.erase(basis=basis, **audit)

        done = self._writes.write(
            key, "erase", {"basis": basis}, command=command, tenant=tenant, actor=actor,
            reason=reason, expected_version=expected_version, idempotency_key=idempotency_key,
        )  # fmt: skip
        # The key row is deleted; what the store's files keep of it goes now (the erasure
        # has committed: a failure here is logged, not the erasure's).
        try:
            emptied = self._views.drop_erased_keys()
        except Exception:
            _log.exception("session %r is erased; its key's old bytes were not dropped", key)
            emptied = True
        if not emptied:
            _log.warning(
                "session %r is erased, but a reader kept the SQLite WAL, which still holds "
                "its deleted data key, from being emptied: run `PRAGMA wal_checkpoint("
                "TRUNCATE)` when the store is idle",
                key,
            )
        return done

    def place_hold(self, key: str, *, reference: str, reason: str, **kw: Any) -> WriteResult:
        """Put the session under a legal hold (`reference`: the matter or ticket), beside
        any it holds already. HoldConflict if it holds one under this reference. `kw`:
        `tenant`, `actor`, `expected_version`, `idempotency_key`, as for every write."""
        return self._hold(key, True, reference, reason, **kw)

    def release_hold(self, key: str, *, reference: str, reason: str, **kw: Any) -> WriteResult:
        """Release the hold placed under `reference`; the others stay. HoldNotFound if the
        session holds none under it. `kw` as `place_hold`'s."""
        return self._hold(key, False, reference, reason, **kw)

    def _hold(self, key: str, place: bool, reference: str, reason: str, **kw: Any) -> WriteResult:
        check_text(reference, "reference", MAX_REASON_CHARS)
        check_text(reason, "reason", MAX_REASON_CHARS, allow_controls=True)

        def command(s: Session, audit: dict[str, Any]) -> None:
            held = self._holds(s)
            if place and reference in held:
                raise HoldConflict(f"session {key!r} is already under legal hold {reference!r}")
            if not place and reference not in held:
                raise HoldNotFound(key, reference, held)
            (s.place_hold if place else s.release_hold)(reference=reference, **audit)

        op = "hold" if place else "release"
        return self._writes.write(key, op, {"reference": reference}, command=command,
                                  reason=reason, **kw)  # fmt: skip

    def _holds(self, s: Session) -> tuple[str, ...]:
        """The references of the session's holds. A session loaded from a snapshot taken
        when it could hold one hold only has that hold unnamed: its reference is read
        back from the events, as long as that hold is held (rare)."""
        held = holds_of(s)
        if UNNAMED_HOLD not in held:
            return held
        folded = _Holds()
        found: Iterable[Any] = self._events.get(s.id, lte=s.version)
        for e in found:
            if isinstance(e, Session.LegalHoldPlaced | Session.LegalHoldReleased):
                e.apply(folded)
        return folded.holds

    def encrypt(
        self, key: str, *, tenant: str | None = None, actor: str | None = None
    ) -> WriteResult | None:
        """Seal the content of a session stored clear (it started before the master key
        was configured) under a data key of its own, in one transaction: its events'
        records and its view rows are rewritten sealed, its hash chain computed again over
        them, and a `SessionEncrypted` event records the head before. None when there is
        nothing to do (sealed already, or erased). EncryptionRequired without a master key."""
        if not self._views.can_seal():
            raise EncryptionRequired("no master key is configured: set LEDGER_MASTER_KEY")
        if self._views.sealed(session_id(self._addresses.tenant(tenant), key)):
            return None

        def command(s: Session, audit: dict[str, Any]) -> None:
            if self._views.sealed(s.id):  # sealed by another process meanwhile
                raise _SealedAlready
            stored = self._views.stored_chain(s.id, s.version - 1, 1)
            head = stored[0][1] if stored else None
            s.encrypt(previous_head=None if head is None else head.hex(), **audit)

        try:
            return self._writes.write(
                key, "encrypt", {}, command=command, tenant=tenant, actor=actor,
                reason="encrypt-existing: the content sealed at rest",
            )  # fmt: skip
        except (_SealedAlready, SessionErasedError):
            return None

    def encrypt_all(self, actor: str | None = None) -> Iterator[tuple[str, str, bool]]:
        """`encrypt` every session of every tenant, one transaction each, in (tenant, key)
        order: (tenant, key, whether it was sealed now). Stopped at any point and run
        again, it seals what is left: each session is sealed whole or not at all."""
        after: tuple[str, str] | None = None
        while page := self._views.all_sessions(after, 1000):
            after = page[-1]
            for tenant, key in page:
                yield tenant, key, self.encrypt(key, tenant=tenant, actor=actor) is not None

    def retention(
        self, rules: list[RetentionRule], now: datetime, *, dry_run: bool = True
    ) -> Iterator[RetentionAction]:
        """Apply each rule at time `now`: erase (unless `dry_run`) each session whose last
        write is older than its rule allows, with the rule as the reason. Held sessions
        are kept and listed as "held"; sessions erased already are skipped."""
        for rule in rules:
            cutoff = now - timedelta(days=rule.days)
            after: str | None = None
            while page := self._views.session_keys(rule.tenant, rule.prefix, after, 1000):
                after = page[-1]
                for key in page:
                    action = self._retain(rule, key, cutoff, dry_run)
                    if action is not None:
                        yield action

    def _retain(
        self, rule: RetentionRule, key: str, cutoff: datetime, dry_run: bool
    ) -> RetentionAction | None:
        sid = session_id(rule.tenant, key)
        head = self._views.session_head(sid)
        if head is not None and head.last_event == ENCRYPTED_EVENT:
            # sealing the content in place is no write of the session's: its age is older
            head = self._views.session_head(sid, head.version - 1)
        if head is None or head.updated_at >= cutoff or head.last_event == ERASED_EVENT:
            return None
        if not self._views.sealed(sid):  # stored clear: erasure would be refused
            return RetentionAction(rule.tenant, key, head.updated_at, "clear", rule.reason)
        held = bool(self._repository.get(sid).held)
        action = "held" if held else ("erase" if dry_run else "erased")
        if action == "erased":
            try:
                self.erase(key, tenant=rule.tenant, reason=rule.reason, basis="retention",
                           actor="retention")  # fmt: skip
            except LegalHold:  # held since it was read: kept
                action = "held"
            except (SessionNotFound, SessionErasedError):  # another process's retention was first
                return None
        return RetentionAction(rule.tenant, key, head.updated_at, action, rule.reason)
