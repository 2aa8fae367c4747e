"""What a limit is: buckets kept by GCRA, the budgets the settings make, and the refusals.

A bucket's level is the theoretical arrival time (TAT) of its next request, in seconds
since the epoch; `settle` is the arithmetic every limit store applies where its levels
are (`ratelimit.py`, `ratelimit_sql.py`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

DAY = 86_400.0
# GCRA sums float steps: ten steps of 0.1 s can exceed a span of 1 s by 2e-16.
SLACK = 1e-9


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
class Bucket:
    """One budget as a request asks it: `step` and `span` in seconds of budget, and the
    `lease` a process may take of it at once (`ratelimit_lease.py`; 0: none)."""

    scope: str
    step: float
    span: float
    lease: float = 0.0


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


def settle(
    levels: Sequence[float | None], buckets: Sequence[Bucket], now: float
) -> tuple[list[float], list[float]]:
    """GCRA over every bucket of one request: the levels it would leave, and per bucket
    the seconds until it would admit the request (all 0: admitted)."""
    moved, waits = [], []
    for level, bucket in zip(levels, buckets, strict=True):
        after = max(level if level is not None else now, now) + bucket.step
        moved.append(after)
        wait = after - bucket.span - now
        waits.append(wait if wait > SLACK else 0.0)
    return moved, waits
