"""What a limit is: the budgets the settings make, each asked as a GCRA bucket, and the
refusals.

A bucket (its level, and `settle`, the arithmetic every limit store applies where its
levels are) is the store's: `projections/rate_limit_store.py`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from session_ledger.projections.rate_limit_store import Bucket

DAY = 86_400.0


class Refused(Exception):
    """A request over a limit: HTTP 429 with `Retry-After`."""

    code = "rate_limited"

    def __init__(self, message: str, retry_after: float, limit: str) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.limit = limit

    @property
    def retry_after_header(self) -> str:
        """Whole seconds, rounded up, at least one (RFC 9110 delay-seconds)."""
        return str(max(1, math.ceil(self.retry_after)))


class RateLimited(Refused):
    """Too many requests a second (code `rate_limited`)."""

    code = "rate_limited"


class QuotaExceeded(Refused):
    """Over a quota of write bytes a day or of sessions (code `quota_exceeded`)."""

    code = "quota_exceeded"


@dataclass(frozen=True)
class Budget:
    """A limit: `per_second` units refill a bucket that holds `burst` units."""

    name: str
    per_second: float
    burst: float
    unit: str
    refusal: type[Refused]
    daily: bool = False

    def bucket(self, owner: str, units: float, lease_share: float = 0.0) -> Bucket:
        """The bucket of `owner` for a request of `units`; a process leases whole units,
        `lease_share` of the burst (less than one unit: no lease)."""
        lease = math.floor(lease_share * self.burst) / self.per_second
        return Bucket(f"{self.name}:{owner}", units / self.per_second,
                      self.burst / self.per_second, lease)  # fmt: skip

    def describe(self) -> str:
        if self.daily:
            return f"{self.burst:.0f} {self.unit} a day"
        return f"{self.per_second:g} {self.unit} a second (burst {self.burst:g})"
