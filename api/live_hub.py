"""The live tails' hub: wakes the tails of a session when a write to it commits, and the
tenant-wide tails of its tenant (only those: a commit of one tenant wakes no tail of
another, so one tenant's writes cost another's tails nothing).

Every tail reads its session's events from the store by version (the audit trail), so a
wake-up is only a hint: a lost one delays delivery, never loses or repeats an event.
Wake-ups come from three places:

- this process's own commits (the views' `after_commit`), at once;
- PostgreSQL: other processes' commits by LISTEN/NOTIFY, each as `<session id>:<tag>`, the
  tag a short digest of its tenant (`tenant_tag`; a tenant name may be long, and two
  tenants that share a tag only wake each other's tails for nothing). A writer never sends NOTIFY in
  its transaction (a notifying commit takes a database-wide lock): a thread of each
  process sends one NOTIFY per batch of committed session ids, at once after a quiet
  spell, else `NOTIFY_DELAY` after the last (a writer only adds its id to the batch:
  waking that thread and sending at every commit cost a single writer's request on
  PostgreSQL about a tenth of its time);
- a watcher that reads the events written since its last look, every `tail_poll_ms`:
  on SQLite the only news of other processes' commits, on PostgreSQL the catch-up for a
  lost notification.

Each tail also reads at every heartbeat, so an event whose wake-up all three missed (a
PostgreSQL id that committed after a later one the watcher saw) arrives by then.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import threading
import time
import uuid
from collections import defaultdict
from functools import lru_cache

import psycopg

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import SessionViews

log = logging.getLogger("session_ledger.api")
CHANNEL = "ledger_events"
NOTIFY_PAYLOAD_BYTES = 7900  # PostgreSQL refuses a payload of 8,000 bytes or more
TAG_CHARS = 8
# a session id's 32 hex digits, a colon, its tenant's tag and a comma
IDS_PER_NOTIFY = NOTIFY_PAYLOAD_BYTES // (32 + 1 + TAG_CHARS + 1)
NOTIFY_DELAY = 0.005  # the least seconds from one batch of NOTIFYs to the next
Commit = tuple[uuid.UUID, str]  # a committed session id and its tenant's tag


@lru_cache(maxsize=4096)
def tenant_tag(tenant: str) -> str:
    """A tenant's short digest: what a NOTIFY carries to wake its tenant-wide tails."""
    return hashlib.sha256(tenant.encode("utf-8", "surrogatepass")).hexdigest()[:TAG_CHARS]


class LiveHub:
    """Tails subscribe to a session id, tenant-wide tails to their tenant, each with an
    asyncio.Event the hub sets on a commit of theirs."""

    def __init__(
        self, ledger: Ledger, database_url: str, poll_seconds: float,
        notify_delay: float = NOTIFY_DELAY,
    ) -> None:  # fmt: skip
        self.ledger = ledger
        self.notify_delay = notify_delay
        self.loop = asyncio.get_running_loop()
        self.poll_seconds = poll_seconds
        self.tails: dict[uuid.UUID, set[asyncio.Event]] = defaultdict(set)
        self.feeds: dict[str, set[asyncio.Event]] = defaultdict(set)  # by tenant tag
        self.postgres = database_url.startswith(("postgresql://", "postgres://"))
        self.url = database_url
        self._outbox: set[Commit] = set()  # committed, not yet notified
        self._outbox_lock = threading.Lock()
        self._news = threading.Event()  # set: the outbox holds ids (or the hub stops)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watcher: asyncio.Task[None] | None = None

    # -- subscriptions (event loop only) ------------------------------------------------------

    def subscribe(self, session_id: uuid.UUID, woken: asyncio.Event) -> None:
        self.tails[session_id].add(woken)

    def unsubscribe(self, session_id: uuid.UUID, woken: asyncio.Event) -> None:
        tails = self.tails.get(session_id)
        if tails is not None:
            tails.discard(woken)
            if not tails:
                del self.tails[session_id]

    def subscribe_tenant(self, tenant: str, woken: asyncio.Event) -> None:
        self.feeds[tenant_tag(tenant)].add(woken)

    def unsubscribe_tenant(self, tenant: str, woken: asyncio.Event) -> None:
        tag = tenant_tag(tenant)
        feeds = self.feeds.get(tag)
        if feeds is not None:
            feeds.discard(woken)
            if not feeds:
                del self.feeds[tag]

    def _wake(self, commits: list[Commit]) -> None:
        for sid, tag in commits:
            for woken in self.tails.get(sid, ()):
                woken.set()
            # no tag: a NOTIFY of a process that sends none, any tenant's
            for feeds in self.feeds.values() if not tag else (self.feeds.get(tag, ()),):
                for woken in feeds:
                    woken.set()

    def _waited(self, commits: list[Commit]) -> bool:
        """Whether a tail of this process waits for any of `commits`."""
        return any(sid in self.tails or tag in self.feeds or (not tag and self.feeds)
                   for sid, tag in commits)  # fmt: skip

    # -- news of commits ---------------------------------------------------------------------

    def committed(self, session_id: uuid.UUID, tenant: str) -> None:
        """The views' `after_commit` (any thread): wake this process's tails of the
        session and of its tenant, if any (waking the event loop from a writer's thread
        costs both threads), and add the session to the next NOTIFY, for the other
        processes."""
        commit = (session_id, tenant_tag(tenant))
        self._wake_soon([commit])
        if self.postgres:
            with self._outbox_lock:
                self._outbox.add(commit)
            self._news.set()  # wakes the NOTIFY thread only if it waits for news

    def _wake_soon(self, commits: list[Commit]) -> None:
        """From another thread: have the event loop wake the tails of `commits`, only if
        any waits (a tail subscribes before it reads, so none misses a commit)."""
        if self._waited(commits) and not self._stop.is_set():  # (stopped: the loop may be gone)
            self.loop.call_soon_threadsafe(self._wake, commits)

    def start(self) -> None:
        self._views.after_commit = self.committed
        if self.postgres:
            for target in (self._notify_loop, self._listen_loop):
                thread = threading.Thread(target=target, daemon=True, name=target.__name__)
                thread.start()
                self._threads.append(thread)
        self._watcher = asyncio.create_task(self._watch())

    async def stop(self) -> None:
        self._views.after_commit = None
        self._stop.set()
        self._news.set()
        if self._watcher is not None:
            self._watcher.cancel()
            await asyncio.gather(self._watcher, return_exceptions=True)

    def _notify_loop(self) -> None:
        """NOTIFY the session ids committed since the last NOTIFY (its own connection; as
        many as the payload limit asks): at once after a quiet spell, else `notify_delay`
        after the last one, so that a stream of commits shares its NOTIFYs."""
        sent = -self.notify_delay  # (monotonic seconds)
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    while True:
                        self._news.wait()
                        if self._stop.wait(max(0.0, sent + self.notify_delay - time.monotonic())):
                            return
                        self._news.clear()
                        with self._outbox_lock:
                            ids = [f"{sid.hex}:{tag}" for sid, tag in self._outbox]
                            self._outbox = set()
                        for start in range(0, len(ids), IDS_PER_NOTIFY):
                            payload = ",".join(ids[start : start + IDS_PER_NOTIFY])
                            conn.execute("SELECT pg_notify(%s, %s)", (CHANNEL, payload))
                        sent = time.monotonic()
            except psycopg.Error as e:  # the watcher covers what this misses
                log.warning("live tail NOTIFY failed: %s", e)
                self._stop.wait(1)

    def _listen_loop(self) -> None:
        while not self._stop.is_set():
            try:
                with psycopg.connect(self.url, autocommit=True) as conn:
                    conn.execute(f"LISTEN {CHANNEL}")
                    while not self._stop.is_set():
                        for note in conn.notifies(timeout=1.0):
                            self._wake_soon(_commits(note.payload))
            except psycopg.Error as e:  # reconnect; the watcher covers the gap
                log.warning("live tail LISTEN failed: %s", e)
                self._stop.wait(1)

    async def _watch(self) -> None:
        """Every `poll_seconds`, wake the tails of sessions with events written since the
        last look (only when some tail is open)."""
        position: int | None = None  # None: no tail open, nothing to look at
        while True:
            await asyncio.sleep(self.poll_seconds)
            if not self.tails and not self.feeds:
                position = None
                continue
            try:
                if position is None:  # watch from now on; what committed before the
                    position = await asyncio.to_thread(self._last_position)
                    self._wake_all()  # look began, the tails read once more
                    continue
                rows = await asyncio.to_thread(self._written_after, position)
            except Exception as e:  # the store is away: look again next time
                log.warning("live tail watcher failed: %s", e)
                continue
            if rows:
                position = rows[-1][0]
                self._wake(list({(sid, tenant_tag(tenant)) for _, sid, tenant in rows}))

    def _wake_all(self) -> None:
        for feeds in self.feeds.values():
            for woken in feeds:
                woken.set()
        for tails in self.tails.values():
            for woken in tails:
                woken.set()

    def _last_position(self) -> int:
        return self._views.last_event_position()

    def _written_after(self, position: int) -> list[tuple[int, uuid.UUID, str]]:
        return self._views.events_written_after(position, 10_000)

    @property
    def _views(self) -> SessionViews:
        return self.ledger.views


def _commits(payload: str) -> list[Commit]:
    """The commits a NOTIFY's payload names (`<session id hex>:<tenant tag>`, comma
    separated; a bare id, of a process that sends no tag, wakes every tenant's tails)."""
    found: list[Commit] = []
    for item in payload.split(","):
        sid, _, tag = item.partition(":")
        if sid:
            found.append((uuid.UUID(sid), tag))
    return found
