"""The errors the ledger raises: one hierarchy, each with a message a caller can act on.

Entry points (HTTP, CLI, adapters) map these to their own shapes; nothing below them
raises library or database errors for an outcome the caller caused.
"""

from __future__ import annotations


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


class StreamConflict(LedgerError):
    """A stream command does not fit the stream's state: a chunk, completion or abort of a
    stream that is not open (never opened, completed or aborted), or a stream id used
    twice; nothing was written."""

    code = "stream_conflict"


class StreamNotFound(LedgerError, LookupError):
    """The session has no stream of this id."""

    code = "stream_not_found"
