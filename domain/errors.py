"""The errors the ledger raises: one hierarchy, each with a message a caller can act on.

Entry points (HTTP, CLI, adapters) map these to their own shapes; nothing below them
raises library or database errors for an outcome the caller caused.
"""

from __future__ import annotations

import warnings
from datetime import datetime
from typing import Any

SHOWN_CHARS = 100  # of a refused value, in its error's message


def shown(value: object) -> str:
    """A refused value as its error names it: its repr, cut to `SHOWN_CHARS` characters
    (a 10 MiB role is not echoed back whole)."""
    text = repr(value)
    if len(text) <= SHOWN_CHARS:
        return text
    return f"{text[:SHOWN_CHARS]}... ({len(text):,} characters)"


class LedgerError(Exception):
    """Base class of every error the ledger raises on purpose."""

    code = "ledger_error"


class InvalidInput(LedgerError, ValueError):
    """An argument was refused; nothing was stored."""

    code = "invalid_input"


class InvalidMessage(InvalidInput):
    """A message is not a valid chat message; `index`: its place in the write, if known."""

    code = "invalid_message"

    def __init__(self, message: str, *, index: int | None = None) -> None:
        super().__init__(message)
        self.index = index


class InvalidSessionKey(InvalidInput):
    """A session key or tenant name is not acceptable."""

    code = "invalid_session_key"


class PayloadTooLarge(InvalidInput):
    """A message or a write exceeds the configured size limits."""

    code = "payload_too_large"


class AnswerTooLarge(PayloadTooLarge):
    """A context window over the largest answer the ledger gives (`max_answer_bytes`):
    a smaller `token_limit` reads it, or the history page by page."""

    code = "answer_too_large"


class TokenLimitExceeded(InvalidInput):
    """`initial_token_count` is larger than `token_limit` (as in LlamaIndex)."""

    code = "token_limit_exceeded"


class SessionNotFound(LedgerError, LookupError):
    """No session has this key (in this tenant)."""

    code = "session_not_found"

    def __init__(self, tenant: str, key: str) -> None:
        super().__init__(f"session {key!r} not found in tenant {tenant!r}")
        self.tenant = tenant
        self.key = key


class StateNotFound(LedgerError, LookupError):
    """The session has no state at the version or time asked for."""

    code = "state_not_found"


class MessageNotFound(LedgerError, IndexError):
    """No message at this position of the session's history."""

    code = "message_not_found"


class VersionConflict(LedgerError):
    """The session is not at the version the caller expected; nothing was written."""

    code = "version_conflict"

    def __init__(self, key: str, expected: int, actual: int) -> None:
        super().__init__(
            f"session {key!r} is at version {actual}, not the expected version {expected}"
        )
        self.key = key
        self.expected = expected
        self.actual = actual


class IdempotencyKeyReused(LedgerError):
    """An idempotency key was used before for a different write."""

    code = "idempotency_key_reused"


class StoreNotReady(LedgerError):
    """The store is unreachable or its tables do not exist (run `migrate`)."""

    code = "store_not_ready"


class StoreUnavailable(StoreNotReady):
    """The store cannot be reached now (an outage, a restart); retry later. A write that
    failed so may or may not have been stored: retry it with the same idempotency key."""

    code = "store_unavailable"


class SessionErasedError(LedgerError):
    """The session's content was erased: nothing of it can be read or written again.
    (The erasure itself is the session's `SessionErased` event.)"""

    code = "session_erased"

    def __init__(self, key: str, erased_at: datetime, reason: str | None, basis: str) -> None:
        super().__init__(
            f"session {key!r} was erased at {erased_at.isoformat()} (reason: {reason}; "
            f"legal basis: {basis})"
        )
        self.key = key
        self.erased_at = erased_at
        self.reason = reason
        self.basis = basis


class LegalHold(LedgerError):
    """The session is under legal hold: it cannot be erased until the hold is released."""

    code = "legal_hold"


class HoldConflict(LedgerError):
    """A hold placed under a reference the session is held under already."""

    code = "hold_conflict"


class HoldNotFound(LedgerError, LookupError):
    """A release naming a reference the session holds no hold under."""

    code = "hold_not_found"

    def __init__(self, key: str, reference: str, held: tuple[str, ...]) -> None:
        holding = ", ".join(repr(r) for r in held) if held else "none"
        super().__init__(
            f"session {key!r} holds no legal hold with reference {reference!r} (its holds: "
            f"{holding}): a hold is released by the reference it was placed under"
        )
        self.key = key
        self.reference = reference
        self.held = held


class EncryptionRequired(LedgerError):
    """Erasure needs the session's content sealed under a key of its own: a store with a
    master key configured, and a session started after it was."""

    code = "encryption_required"


class CheckpointError(LedgerError):
    """A checkpoint could not be made or read: no signing key, a file that is not one."""

    code = "checkpoint_error"


class CheckpointNotFound(LedgerError, LookupError):
    """The tenant has no checkpoint yet (or checkpoints are not configured)."""

    code = "checkpoint_not_found"


class StreamConflict(LedgerError):
    """A stream command does not fit the stream's state: a chunk, completion or abort of a
    stream that is not open (never opened, completed or aborted), or a stream id used
    twice; nothing was written."""

    code = "stream_conflict"


class StreamNotFound(LedgerError, LookupError):
    """The session has no stream of this id."""

    code = "stream_not_found"


# Renamed, kept importable for callers that catch them: SessionErased is the name of the
# erasure event (`Session.SessionErased`, in the audit trail), the error is SessionErasedError.
_RENAMED = {"SessionErased": SessionErasedError}


def __getattr__(name: str) -> Any:
    renamed = _RENAMED.get(name)
    if renamed is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    warnings.warn(f"{name} is now {renamed.__name__}", DeprecationWarning, stacklevel=2)
    return renamed
