"""The live tails' hub: a commit wakes this process's tails of its session and the
tenant-wide tails of its tenant, and only them; with no tail waiting, a writer's thread
does not wake the event loop at all."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path
from typing import Any

import psycopg

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.live_hub import CHANNEL, LiveHub, tenant_tag
from session_ledger.api.settings import Settings
from session_ledger.domain.session import session_id
from tests.conftest import postgres_server_url, postgres_url

MESSAGE = [{"role": "user", "content": "hi"}]


class WakeCount:
    """The hub's wake-ups of the running loop, counted (a worker thread's end, also sent
    by `call_soon_threadsafe`, is not one)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.wakes = 0
        self.call_soon_threadsafe = loop.call_soon_threadsafe
        loop.call_soon_threadsafe = self  # type: ignore[method-assign]

    def __call__(self, callback: Any, *args: Any) -> Any:
        self.wakes += getattr(callback, "__name__", "") == "_wake"
        return self.call_soon_threadsafe(callback, *args)


def test_a_commit_wakes_the_tails_of_its_session_and_no_one_else(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}", auto_migrate=True)
    ledger = open_ledger(settings)

    async def run() -> tuple[int, bool, bool, bool, bool]:
        counted = WakeCount(asyncio.get_running_loop())
        hub = LiveHub(ledger, settings.database_url, poll_seconds=60)
        hub.start()
        try:
            await asyncio.to_thread(ledger.put_messages, "quiet", MESSAGE)  # no tail yet
            unwoken = counted.wakes
            mine = asyncio.Event()
            hub.subscribe(session_id(settings.default_tenant, "quiet"), mine)
            await asyncio.to_thread(ledger.put_messages, "other", MESSAGE)
            await asyncio.sleep(0.05)
            other_woke = mine.is_set()
            await asyncio.to_thread(ledger.put_messages, "quiet", MESSAGE)
            await asyncio.wait_for(mine.wait(), 5)
            tenant_a, tenant_b = asyncio.Event(), asyncio.Event()
            hub.subscribe_tenant("a", tenant_a)
            hub.subscribe_tenant("b", tenant_b)
            for n in range(20):  # another tenant's commits wake no tail of tenant a
                await asyncio.to_thread(ledger.put_messages, f"b{n}", MESSAGE, tenant="b")
            await asyncio.wait_for(tenant_b.wait(), 5)
            await asyncio.sleep(0.05)
            a_woke_by_b = tenant_a.is_set()
            await asyncio.to_thread(ledger.put_messages, "third", MESSAGE, tenant="a")
            await asyncio.wait_for(tenant_a.wait(), 5)
            return unwoken, other_woke, mine.is_set(), a_woke_by_b, tenant_a.is_set()
        finally:
            await hub.stop()

    try:
        assert asyncio.run(run()) == (0, False, True, False, True)
    finally:
        ledger.close()


def test_notifications_wake_the_loop_only_for_the_tails_that_wait(tmp_path: Path) -> None:
    """PostgreSQL: every process hears every commit's NOTIFY (its own included); the
    listener wakes the event loop only for a session some tail of this process waits on."""
    url = postgres_server_url()
    ledger = open_ledger(Settings(database_url=postgres_url(), auto_migrate=True))
    unheard = [uuid.uuid4() for _ in range(20)]

    async def run() -> tuple[int, bool]:
        counted = WakeCount(asyncio.get_running_loop())
        conn = psycopg.connect(url, autocommit=True)
        listening = f"SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN {CHANNEL}'"
        before = conn.execute(listening).fetchone()
        hub = LiveHub(ledger, url, poll_seconds=60)
        hub.start()
        try:
            waited = uuid.uuid4()
            tail, feed, other_feed = asyncio.Event(), asyncio.Event(), asyncio.Event()
            hub.subscribe(waited, tail)
            hub.subscribe_tenant("a", feed)
            hub.subscribe_tenant("b", other_feed)
            with conn:
                while conn.execute(listening).fetchone() == before:
                    await asyncio.sleep(0.01)  # the hub's listener is not listening yet
                for sid in unheard:  # one sender: delivered in this order, before the last
                    note = f"{sid.hex}:{tenant_tag('c')}"  # a tenant with no tail here
                    conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, note))
                note = f"{unheard[0].hex}:{tenant_tag('c')},{waited.hex}:{tenant_tag('a')}"
                conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, note))
            await asyncio.wait_for(tail.wait(), 10)
            await asyncio.wait_for(feed.wait(), 10)
            return counted.wakes, tail.is_set(), other_feed.is_set()
        finally:
            await hub.stop()

    try:
        assert asyncio.run(run()) == (1, True, False)
    finally:
        ledger.close()


def _heard(conn: psycopg.Connection[Any], wanted: set[str]) -> list[str]:
    """The payloads of this connection's notifications until every id wanted was heard."""
    payloads: list[str] = []
    heard: set[str] = set()
    while not wanted <= heard:
        notes = list(conn.notifies(timeout=10, stop_after=1))
        assert notes, f"{len(wanted - heard)} committed ids never notified"
        payloads += [note.payload for note in notes]
        heard.update(h.partition(":")[0] for note in notes for h in note.payload.split(","))
    return payloads


def test_commits_that_come_together_share_their_notify() -> None:
    """PostgreSQL: a commit only adds its session id to the next NOTIFY, sent at once
    after a quiet spell, else `notify_delay` after the last one: twenty commits two
    milliseconds apart make two NOTIFYs (the first at once), not twenty. Five hundred
    ids are split by the payload limit."""
    url = postgres_server_url()
    ledger = open_ledger(Settings(database_url=postgres_url(), auto_migrate=True))
    spaced = [uuid.uuid4() for _ in range(20)]
    many = [uuid.uuid4() for _ in range(500)]

    async def run() -> tuple[list[str], list[str]]:
        listener = psycopg.connect(url, autocommit=True)
        listener.execute(f"LISTEN {CHANNEL}")
        hub = LiveHub(ledger, url, poll_seconds=60, notify_delay=0.5)
        hub.start()
        try:
            with listener:
                for sid in spaced:  # the recorder's after_commit, as each write commits
                    hub.committed(sid, "a")
                    await asyncio.sleep(0.002)
                first = await asyncio.to_thread(_heard, listener, {s.hex for s in spaced})
                for sid in many:
                    hub.committed(sid, "a")
                second = await asyncio.to_thread(_heard, listener, {s.hex for s in many})
            return first, second
        finally:
            await hub.stop()

    try:
        spaced_payloads, many_payloads = asyncio.run(run())
    finally:
        ledger.close()
    assert len(spaced_payloads) <= 5, spaced_payloads
    assert len(many_payloads) >= 3  # 500 ids of 42 bytes do not fit one payload
    assert all(len(p) < 8000 for p in many_payloads)
