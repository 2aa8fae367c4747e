"""The live tails a server process holds open: how many each key and tenant may hold, how
long one lasts, and their end when their key is revoked.

A tail costs its process for as long as it is open: a connection, a task, a read at
every wake-up. So the limits are per process, counted in its memory, where that cost
is, and a tail freed by a process that dies is freed with it (a count shared in the
store would need leases that outlive a killed process). With `workers` processes a key
may hold up to `workers` times its limit, each process loaded no more than the limit.

A tail's key was good when it opened. The key table's version moves with every revoke
(`key_cache.py`); every `tail_key_check_ms` the process looks at it, and when it moved
(or tails opened since the last look) reads the keys of the tenants holding tails and
ends the tails of a revoked key: each sends a last comment and the stream closes. The
same look ends the tails whose lifetime is over. A tail whose client reads nothing (its
answer waits for the client to take what was sent) is cut `END_GRACE_SECONDS` later.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from collections.abc import Hashable
from dataclasses import dataclass, field

from .auth import Principal
from .keystore import KeyStore
from .ratelimit_budget import Refused

log = logging.getLogger("session_ledger.api")
RETRY_AFTER_SECONDS = 5.0  # a refused tail may ask again: one may have ended by then
END_GRACE_SECONDS = 0.5  # how long an ended tail may take to say why before it is cut


class TooManyTails(Refused):
    """A key or tenant holds as many live tails as it may (HTTP 429, `too_many_tails`)."""

    code = "too_many_tails"


@dataclass(eq=False)
class OpenTail:
    """One open tail: whose, until when, and the event that wakes it (a commit it may
    want, or its end)."""

    who: Principal
    deadline: float  # time.monotonic() when its lifetime is over
    woken: asyncio.Event = field(default_factory=asyncio.Event)
    ended: str | None = None  # why it must end now (None: it goes on)
    gone: asyncio.Event = field(default_factory=asyncio.Event)  # set with `ended`

    def end(self, why: str) -> None:
        self.ended = why
        self.gone.set()
        self.woken.set()

    def left(self) -> float:
        """Seconds of its lifetime left."""
        return self.deadline - time.monotonic()


class LiveTails:
    """The tails this process holds open, counted per key and per tenant."""

    def __init__(
        self, keys: KeyStore, *, per_key: int, per_tenant: int, max_seconds: float,
        check_seconds: float,
    ) -> None:  # fmt: skip
        self.keys = keys
        self.per_key = per_key
        self.per_tenant = per_tenant
        self.max_seconds = max_seconds
        self.check_seconds = check_seconds
        self.open: set[OpenTail] = set()
        self._by_key: Counter[str] = Counter()
        self._by_tenant: Counter[str] = Counter()
        self._unchecked: set[str] = set()  # tenants whose tails opened since the last look
        self._checker: asyncio.Task[None] | None = None

    def opened(self, who: Principal) -> OpenTail:
        """Count a new tail of `who` (event loop only), or refuse it: TooManyTails."""
        if self._by_key[who.key_id] >= self.per_key:
            raise TooManyTails(
                f"this API key holds {self.per_key} live tails already (the most it may); "
                "close one first", RETRY_AFTER_SECONDS, "tails:key",
            )  # fmt: skip
        if self._by_tenant[who.tenant] >= self.per_tenant:
            raise TooManyTails(
                f"this tenant holds {self.per_tenant} live tails already (the most it may); "
                "close one first", RETRY_AFTER_SECONDS, "tails:tenant",
            )  # fmt: skip
        tail = OpenTail(who, time.monotonic() + self.max_seconds)
        self.open.add(tail)
        self._by_key[who.key_id] += 1
        self._by_tenant[who.tenant] += 1
        self._unchecked.add(who.tenant)
        return tail

    def closed(self, tail: OpenTail) -> None:
        """Uncount `tail` (once; a second call does nothing)."""
        if tail in self.open:
            self.open.discard(tail)
            for counts, name in ((self._by_key, tail.who.key_id),
                                 (self._by_tenant, tail.who.tenant)):  # fmt: skip
                counts[name] -= 1
                if counts[name] <= 0:
                    del counts[name]

    def start(self) -> None:
        self._checker = asyncio.create_task(self._check_keys())

    async def stop(self) -> None:
        for tail in list(self.open):
            tail.end("the server is stopping")
        if self._checker is not None:
            self._checker.cancel()
            await asyncio.gather(self._checker, return_exceptions=True)

    async def _check_keys(self) -> None:
        seen: Hashable = None
        while True:
            await asyncio.sleep(self.check_seconds)
            fresh, self._unchecked = self._unchecked, set()
            if not self.open:
                continue
            for tail in list(self.open):
                if tail.ended is None and tail.left() <= 0:
                    tail.end("its time is over")
            try:
                version = await asyncio.to_thread(self.keys.version)
                holding = {t.who.tenant for t in self.open}
                # None: the version is not known (PostgreSQL not listening): look each time
                moved = version is None or version != seen
                revoked: set[str] = set()
                for tenant in holding if moved else fresh & holding:
                    records = await asyncio.to_thread(self.keys.list, tenant)
                    revoked |= {r.id for r in records if r.revoked_at is not None}
                seen = version
            except Exception as e:  # the store is away: look again next time
                log.warning("live tails: key check failed: %s", e)
                self._unchecked |= fresh
                continue
            for tail in list(self.open):
                if tail.who.key_id in revoked:
                    tail.end("the API key was revoked")
