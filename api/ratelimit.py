"""Rate limits and quotas per API key and per tenant, and failed authentications per
client address, shared by every API process.

Budgets are buckets kept by GCRA (the generic cell rate algorithm): a bucket's level is
the theoretical arrival time (TAT) of its next request, in seconds since the epoch. A
request costing `step` seconds of budget is admitted when `max(level, now) + step - now`
stays within the bucket's `span` (its burst, in seconds); admitting it moves the level
there. A request asks every bucket it touches at once and is admitted by all or charged
to none, so a key refused by its own limit does not spend its tenant's budget.

The buckets live in the store the ledger uses (`projections/rate_limit_store.py`, picked
by `bootstrap.open_limit_store`), so several API processes share one budget: the process
computes the steps and the verdict's message, and admits most requests from leases it
took of the shared buckets (`ratelimit_lease.py`) without a store round trip. The count
of a tenant's sessions is a level that never drains.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from session_ledger.domain.errors import PayloadTooLarge, SessionNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.rate_limit_store import Bucket, LimitStore, settle

from .auth import Principal
from .ratelimit_budget import DAY, Budget, QuotaExceeded, RateLimited
from .ratelimit_lease import Leases, leases_to_ask
from .settings import Settings

# The sessions quota does not drain with time: a refused caller can only wait for an
# operator to raise it, so it is told to come back much later.
SESSIONS_RETRY_AFTER = 3600.0
KEYS_PER_PAGE = 10_000


def budgets(settings: Settings) -> tuple[list[Budget], list[Budget]]:
    """The configured (key, tenant) budgets; a limit of 0 is left out."""
    by_key = [
        Budget("requests:key", settings.rate_limit_key_per_second,
               settings.rate_limit_key_burst, "requests", RateLimited),
        Budget("write_bytes:key", settings.quota_key_write_bytes_per_day / DAY,
               settings.quota_key_write_bytes_per_day, "write bytes", QuotaExceeded, daily=True),
    ]  # fmt: skip
    by_tenant = [
        Budget("requests:tenant", settings.rate_limit_tenant_per_second,
               settings.rate_limit_tenant_burst, "requests", RateLimited),
        Budget("write_bytes:tenant", settings.quota_tenant_write_bytes_per_day / DAY,
               settings.quota_tenant_write_bytes_per_day, "write bytes", QuotaExceeded, daily=True),
    ]  # fmt: skip
    return [b for b in by_key if b.per_second > 0], [b for b in by_tenant if b.per_second > 0]


def failure_budgets(settings: Settings) -> list[Budget]:
    """The configured budget of failed authentications per client address (0: none)."""
    by_address = Budget(
        "auth_failures:address", settings.auth_failures_per_second,
        settings.auth_failures_burst, "failed authentications", RateLimited,
    )  # fmt: skip
    return [by_address] if by_address.per_second > 0 else []


class Limiter:
    """Admits or refuses one request of one principal against every configured limit."""

    def __init__(
        self, settings: Settings, store: LimitStore, clock: Callable[[], float] = time.time
    ) -> None:
        self.store = store
        self.clock = clock
        self.by_key, self.by_tenant = budgets(settings)
        self.by_address = failure_budgets(settings)
        self.max_sessions = settings.quota_tenant_sessions
        # Sessions are never deleted, so one seen to exist always will: each process asks
        # the ledger about a session once, not on every write.
        self._known: OrderedDict[tuple[str, str], None] = OrderedDict()
        self._known_size = settings.aggregate_cache_size
        self._refused: OrderedDict[str, float] = OrderedDict()
        self._lock = threading.Lock()
        self.lease_share = settings.rate_limit_lease
        self.leases = Leases(settings.aggregate_cache_size)

    def admit(self, principal: Principal, write_bytes: int) -> None:
        """Charge the request to its key and tenant, or raise Refused and charge nothing:
        from this process's leases where they cover a bucket, else from the store."""
        self._charge(*self._buckets(principal, write_bytes))

    def admit_in_memory(self, principal: Principal, write_bytes: int) -> bool:
        """Admit the request from this process's leases, or raise Refused if what it
        already saw refuses it: no I/O, so neither needs a worker thread. False: `admit`
        must ask the store (nothing was charged)."""
        return self._charge_in_memory(*self._buckets(principal, write_bytes))

    def refuse_known_failures(self, address: str) -> None:
        """Raise Refused if this process saw `address` over its failed authentications'
        limit and it has not drained yet (no I/O): its key is then not looked up at all."""
        charged, buckets = self._failure_buckets(address)
        if buckets:
            self._refuse(charged, self._known_refusals(buckets, self.clock()))

    def admit_failure_in_memory(self, address: str) -> bool:
        """`admit_in_memory` for a failed authentication from `address`."""
        return self._charge_in_memory(*self._failure_buckets(address))

    def admit_failure(self, address: str) -> None:
        """Charge a failed authentication to its client address, or raise Refused."""
        self._charge(*self._failure_buckets(address))

    def _charge(self, charged: list[tuple[Budget, str]], buckets: list[Bucket]) -> None:
        if not buckets:
            return
        now = self.clock()
        self._refuse(charged, self._known_refusals(buckets, now))
        reserved = self.leases.reserve(buckets, whole=False)
        if all(reserved):
            return
        try:
            asked = [b for b, taken in zip(buckets, reserved, strict=True) if not taken]
            found = iter(self._take(asked, now))
            waits = [0.0 if taken else next(found) for taken in reserved]
            self._refuse(charged, waits)
        except BaseException:
            self.leases.release(buckets, reserved)
            raise

    def _charge_in_memory(self, charged: list[tuple[Budget, str]], buckets: list[Bucket]) -> bool:
        if not buckets:
            return True
        self._refuse(charged, self._known_refusals(buckets, self.clock()))
        return all(self.leases.reserve(buckets, whole=True))

    def counts_session(self, tenant: str, created: str | None) -> bool:
        """Whether `count_session` of the session key `created` may go to the store."""
        return bool(created is not None and self.max_sessions
                    and not self._is_known(tenant, created))  # fmt: skip

    def _take(self, buckets: list[Bucket], now: float) -> list[float]:
        """One store call for the buckets this process holds too little of, asking for a
        lease of each; a second, for the request alone, when the store cannot give them."""
        leases = leases_to_ask(buckets)
        if leases != buckets:
            waits = self.store.take(leases, now)
            if not any(waits):
                self.leases.keep(leases, buckets)
                return waits
        waits = self.store.take(buckets, now)
        self._remember_refusals(buckets, waits, now)
        return waits

    def _buckets(
        self, principal: Principal, write_bytes: int
    ) -> tuple[list[tuple[Budget, str]], list[Bucket]]:
        """The buckets the request asks, and for each its budget and whose it is."""
        asked = [(b, principal.key_id, f"API key {principal.key_id}") for b in self.by_key]
        asked += [(b, principal.tenant, f"tenant {principal.tenant!r}") for b in self.by_tenant]
        charged, buckets = [], []
        for budget, owner, who in asked:
            units = 1 if budget.unit == "requests" else write_bytes
            if units > budget.burst:
                raise PayloadTooLarge(
                    f"a write of {units} bytes can never fit the {who}'s quota of "
                    f"{budget.describe()}"
                )
            if units:  # a read costs no write bytes: their buckets are not asked
                charged.append((budget, who))
                buckets.append(budget.bucket(owner, units, self.lease_share))
        return charged, buckets

    def _failure_buckets(self, address: str) -> tuple[list[tuple[Budget, str]], list[Bucket]]:
        who = f"client address {address}"
        return ([(b, who) for b in self.by_address],
                [b.bucket(address, 1, self.lease_share) for b in self.by_address])  # fmt: skip

    @staticmethod
    def _refuse(charged: list[tuple[Budget, str]], waits: list[float]) -> None:
        wait, (budget, who) = max(zip(waits, charged, strict=True), key=lambda pair: pair[0])
        if wait > 0:
            raise budget.refusal(
                f"{who} is over its limit of {budget.describe()}; retry in {wait:.3g} s",
                retry_after=wait, limit=budget.name,
            )  # fmt: skip

    def _known_refusals(self, buckets: list[Bucket], now: float) -> list[float]:
        """The waits that levels this process saw refuse before still give: a bucket's
        level only grows (in every process), so a refusal from them is final and costs
        the store nothing. A flood's requests are mostly refused this way."""
        with self._lock:
            levels = [self._refused.get(b.scope) for b in buckets]
        if all(level is None for level in levels):
            return [0.0] * len(buckets)
        return settle(levels, buckets, now)[1]

    def _remember_refusals(self, buckets: list[Bucket], waits: list[float], now: float) -> None:
        with self._lock:
            for bucket, wait in zip(buckets, waits, strict=True):
                if wait > 0:  # then the store's level was past `now`: wait tells it exactly
                    self._refused[bucket.scope] = wait + bucket.span - bucket.step + now
                    self._refused.move_to_end(bucket.scope)
            while len(self._refused) > self._known_size:
                self._refused.popitem(last=False)

    def count_session(self, ledger: Ledger, tenant: str, key: str) -> bool:
        """Count `key` against its tenant's sessions quota if the write would create it:
        True when counted (`uncount_session` takes it back if the write fails)."""
        if not self.max_sessions or self._is_known(tenant, key):
            return False
        try:
            ledger.head(key, tenant=tenant)
        except SessionNotFound:
            pass
        else:
            self.session_exists(tenant, key)
            return False
        if not self.store.count(f"sessions:{tenant}", self.max_sessions,
                                lambda: _count_sessions(ledger, tenant)):  # fmt: skip
            raise QuotaExceeded(
                f"tenant {tenant!r} holds its quota of {self.max_sessions} sessions; "
                "write to an existing session or ask for a higher quota",
                retry_after=SESSIONS_RETRY_AFTER, limit="sessions:tenant",
            )  # fmt: skip
        return True

    def uncount_session(self, tenant: str) -> None:
        self.store.uncount(f"sessions:{tenant}")

    def session_exists(self, tenant: str, key: str) -> None:
        with self._lock:
            self._known[(tenant, key)] = None
            self._known.move_to_end((tenant, key))
            while len(self._known) > self._known_size:
                self._known.popitem(last=False)

    def _is_known(self, tenant: str, key: str) -> bool:
        with self._lock:
            return (tenant, key) in self._known


def _count_sessions(ledger: Ledger, tenant: str) -> int:
    """The tenant's sessions, once, when its count is first kept (a store that held
    sessions before limits were on starts from them)."""
    total, after = 0, None
    while page := ledger.keys(tenant=tenant, after=after, limit=KEYS_PER_PAGE):
        total, after = total + len(page), page[-1]
    return total
