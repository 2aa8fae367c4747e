"""The live tails a process holds: counted per key and per tenant (429 beyond), freed
once each; a revoked key's tails told to end at the next look, no other key's; and the
tenant tail's cursors: opaque, for their tenant only, the position back exactly."""

from __future__ import annotations

import asyncio

import pytest

from session_ledger.api.auth import Principal
from session_ledger.api.feed_cursors import FeedCursors, ServerFeedCursors
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.live_tails import LiveTails, TooManyTails
from session_ledger.domain.errors import InvalidInput


def tails(keys: MemoryKeyStore | None = None, **limits: int) -> LiveTails:
    return LiveTails(
        keys or MemoryKeyStore(), per_key=limits.get("per_key", 2),
        per_tenant=limits.get("per_tenant", 3), max_seconds=60, check_seconds=0.01,
    )  # fmt: skip


def test_tails_are_counted_per_key_and_per_tenant() -> None:
    async def run() -> None:
        held = tails()
        a1, a2, b1 = (
            Principal("a1", "a", "auditor"),
            Principal("a2", "a", "admin"),
            Principal("b1", "b", "auditor"),
        )
        first = [held.opened(a1) for _ in range(2)]
        with pytest.raises(TooManyTails, match="API key holds 2"):
            held.opened(a1)
        held.opened(a2)
        with pytest.raises(TooManyTails, match="tenant holds 3") as refused:
            held.opened(a2)
        assert refused.value.limit == "tails:tenant" and refused.value.retry_after > 0
        held.opened(b1)  # another tenant's count is its own
        held.closed(first[0])
        held.closed(first[0])  # twice: freed once
        held.opened(a1)
        with pytest.raises(TooManyTails):
            held.opened(a2)

    asyncio.run(run())


def test_a_revoked_keys_tails_end_and_no_others() -> None:
    keys = MemoryKeyStore()
    revoked, _ = keys.create("a", "auditor")
    kept, _ = keys.create("a", "auditor")

    async def run() -> tuple[list[str | None], list[bool]]:
        held = tails(keys)
        held.start()
        try:
            doomed = [held.opened(Principal(revoked.id, "a", "auditor")) for _ in range(2)]
            alive = held.opened(Principal(kept.id, "a", "auditor"))
            await asyncio.sleep(0.05)
            keys.revoke(revoked.id)
            await asyncio.wait_for(asyncio.gather(*(t.woken.wait() for t in doomed)), 5)
            await asyncio.sleep(0.05)
            return [t.ended for t in (*doomed, alive)], [alive.woken.is_set()]
        finally:
            await held.stop()

    ended, woken = asyncio.run(run())
    assert ended == ["the API key was revoked"] * 2 + [None] and woken == [False]


def test_cursors_are_opaque_and_of_one_tenant() -> None:
    cursors = FeedCursors("a secret of the servers")
    for position in ("0", "123456", "18446744073709551615.9223372036854775807"):
        once, again = cursors.seal("a", position), cursors.seal("a", position)
        assert once != again  # the same position never looks alike twice
        assert cursors.open("a", once) == cursors.open("a", again) == position
        assert len(once) <= 64
        with pytest.raises(InvalidInput, match="not a position of this tenant's feed"):
            cursors.open("b", once)
        with pytest.raises(InvalidInput):
            FeedCursors("another secret entirely").open("a", once)
    for bad in ("", "123", "1.2", "yesterday", "é" * 10, "A" * 200, cursors.seal("a", "1")[:-2]):
        with pytest.raises(InvalidInput):
            cursors.open("a", bad)


def test_the_servers_cursors_use_the_setting_else_the_stores_secret_read_once() -> None:
    reads: list[str] = []

    def stored_secret() -> str:
        reads.append("read")
        return "the store's own secret"

    async def run() -> tuple[FeedCursors, FeedCursors, FeedCursors]:
        configured = ServerFeedCursors("a secret of the operator's", stored_secret)
        unset = ServerFeedCursors(None, stored_secret)
        return await configured.get(), await unset.get(), await unset.get()

    configured, first, again = asyncio.run(run())
    assert reads == ["read"] and first is again  # read on first use, once
    sealed = first.seal("a", "7")
    assert FeedCursors("the store's own secret").open("a", sealed) == "7"
    assert FeedCursors("a secret of the operator's").open("a", configured.seal("a", "7")) == "7"
    with pytest.raises(InvalidInput):
        configured.open("a", sealed)
