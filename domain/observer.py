"""What the ledger reports about its own work, for metrics and tracing to pick up.

The ledger calls a `LedgerObserver`: around each store call (a write's save, a window
read, a history read), for the events each write stored, and for each write that lost a
race or was refused on a stale expected version. The API implements it with Prometheus
collectors and OpenTelemetry spans; an in-process ledger keeps the silent default.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import Protocol

# The store calls a ledger times, by the name observers report them under.
WRITE = "write"
READ_WINDOW = "read_window"
READ_HISTORY = "read_history"


class LedgerObserver(Protocol):
    """Told what the ledger did; must be cheap and must not raise."""

    def store_call(self, operation: str) -> AbstractContextManager[object]:
        """Wraps one call of the store (`WRITE`, `READ_WINDOW`, `READ_HISTORY`)."""
        ...

    def events_written(self, topics: Sequence[str]) -> None:
        """A write committed these events (their type names, e.g. `MessagesAppended`)."""
        ...

    def write_retried(self) -> None:
        """A write lost the race for its session's next version and runs again."""
        ...

    def version_conflict(self) -> None:
        """A write was refused: its `expected_version` is not the session's version."""
        ...


# A context that does nothing holds no state: one serves every store call unobserved.
_UNOBSERVED: AbstractContextManager[object] = nullcontext()


class SilentObserver:
    """Observes nothing: the default of a ledger nobody watches."""

    def store_call(self, operation: str) -> AbstractContextManager[object]:
        return _UNOBSERVED

    def events_written(self, topics: Sequence[str]) -> None:
        return None

    def write_retried(self) -> None:
        return None

    def version_conflict(self) -> None:
        return None


SILENT = SilentObserver()
