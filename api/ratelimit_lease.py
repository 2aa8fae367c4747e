"""The part of each shared bucket this process holds: leases taken from the limit store.

A request that asked the store for one unit of every bucket costs a store round trip (on
PostgreSQL a pooled connection and a function call, 1.4 to 1.9 ms). Instead, the process
asks for a lease: `Bucket.lease` seconds of the bucket's budget at once (a share of its
burst, `LEDGER_RATE_LIMIT_LEASE`), charged to the shared bucket like that many requests,
and admits the next requests from it in memory until it is spent. The shared bucket
stays the one budget of every process: a process admits only what the store charged it,
so the processes together never admit more than the budget over time; what a lease adds
is that its units may be spent up to the whole lease later than they were charged.
Units a process leased and did not spend are lost to the others (at most one lease per
bucket and process): a key near its limit may be refused by one process while another
still holds a few of its units.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import replace

from session_ledger.projections.rate_limit_store import SLACK, Bucket


class Leases:
    """Seconds of budget this process holds per bucket scope, taken from the store."""

    def __init__(self, size: int) -> None:
        self._held: OrderedDict[str, float] = OrderedDict()
        self._size = size
        self._lock = threading.Lock()

    def reserve(self, buckets: Sequence[Bucket], *, whole: bool) -> list[bool]:
        """Take each bucket's step from what this process holds, where it covers it. With
        `whole`, only if it covers every bucket (else nothing is taken). Per bucket:
        whether it was taken."""
        with self._lock:
            covered = [self._held.get(b.scope, 0.0) + SLACK >= b.step for b in buckets]
            if whole and not all(covered):
                return [False] * len(buckets)
            for bucket, taken in zip(buckets, covered, strict=True):
                if taken:
                    self._held[bucket.scope] -= bucket.step
            return covered

    def release(self, buckets: Sequence[Bucket], reserved: Sequence[bool]) -> None:
        """Give back what `reserve` took for a request that was refused after all."""
        with self._lock:
            for bucket, taken in zip(buckets, reserved, strict=True):
                if taken:
                    self._held[bucket.scope] = self._held.get(bucket.scope, 0.0) + bucket.step

    def keep(self, asked: Sequence[Bucket], buckets: Sequence[Bucket]) -> None:
        """The store charged `asked` for requests of `buckets`: hold the difference."""
        with self._lock:
            for lease, bucket in zip(asked, buckets, strict=True):
                rest = lease.step - bucket.step
                if rest > SLACK:
                    self._held[bucket.scope] = self._held.get(bucket.scope, 0.0) + rest
                    self._held.move_to_end(bucket.scope)
            while len(self._held) > self._size:  # a lease dropped is only budget unspent
                self._held.popitem(last=False)


def leases_to_ask(buckets: Sequence[Bucket]) -> list[Bucket]:
    """Each bucket asked for its lease instead of one request's step, where that is more."""
    return [replace(b, step=max(b.step, b.lease)) for b in buckets]
