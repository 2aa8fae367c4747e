"""The live tails' hub: wakes the tails of a session when a write to it commits.

Every tail reads its session's events from the store by version (the audit trail), so a
wake-up is only a hint: a lost one delays delivery, never loses or repeats an event.
Wake-ups come from three places:

- this process's own commits (the recorder's `after_commit`), at once;
- PostgreSQL: other processes' commits by LISTEN/NOTIFY. A writer never sends NOTIFY in
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
import logging
import threading
import time
import uuid
from collections import defaultdict
from typing import cast

import psycopg

from session_ledger.domain.ledger import Ledger
from session_ledger.projections.views import SQLViews

log = logging.getLogger("session_ledger.api")
CHANNEL = "ledger_events"
NOTIFY_PAYLOAD_BYTES = 7900  # PostgreSQL refuses a payload of 8,000 bytes or more
IDS_PER_NOTIFY = NOTIFY_PAYLOAD_BYTES // 33  # a session id's 32 hex digits and a comma
NOTIFY_DELAY = 0.005  # the least seconds from one batch of NOTIFYs to the next


class LiveHub:
    """Tails subscribe to a session id and get an asyncio.Event set on its commits;
    tenant-wide tails subscribe to every commit (each reads only its tenant's events)."""

    def __init__(
        self, ledger: Ledger, database_url: str, poll_seconds: float,
        notify_delay: float = NOTIFY_DELAY,
    ) -> None:  # fmt: skip
        self.ledger = ledger
        self.notify_delay = notify_delay
        self.loop = asyncio.get_running_loop()
        self.poll_seconds = poll_seconds
        self.tails: dict[uuid.UUID, set[asyncio.Event]] = defaultdict(set)
        self.feeds: set[asyncio.Event] = set()
        self.postgres = database_url.startswith(("postgresql://", "postgres://"))
        self.url = database_url
        self._outbox: set[uuid.UUID] = set()  # committed, not yet notified
        self._outbox_lock = threading.Lock()
        self._news = threading.Event()  # set: the outbox holds ids (or the hub stops)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._watcher: asyncio.Task[None] | None = None

    # -- subscriptions (event loop only) ------------------------------------------------------

    def subscribe(self, session_id: uuid.UUID) -> asyncio.Event:
        woken = asyncio.Event()
        self.tails[session_id].add(woken)
        return woken

    def unsubscribe(self, session_id: uuid.UUID, woken: asyncio.Event) -> None:
        tails = self.tails.get(session_id)
        if tails is not None:
            tails.discard(woken)
            if not tails:
                del self.tails[session_id]

    def subscribe_all(self) -> asyncio.Event:
        woken = asyncio.Event()
        self.feeds.add(woken)
        return woken

    def unsubscribe_all(self, woken: asyncio.Event) -> None:
        self.feeds.discard(woken)

    def _wake(self, session_ids: list[uuid.UUID]) -> None:
        if session_ids:
            for woken in self.feeds:
                woken.set()
        for sid in session_ids:
            for woken in self.tails.get(sid, ()):
                woken.set()

    # -- news of commits ---------------------------------------------------------------------

    def committed(self, session_id: uuid.UUID) -> None:
        """The recorder's `after_commit` (any thread): wake this process's tails of the
        session, if any (waking the event loop from a writer's thread costs both threads),
        and add the session to the next NOTIFY, for the other processes."""
        self._wake_soon([session_id])
        if self.postgres:
            with self._outbox_lock:
                self._outbox.add(session_id)
            self._news.set()  # wakes the NOTIFY thread only if it waits for news

    def _wake_soon(self, session_ids: list[uuid.UUID]) -> None:
        """From another thread: have the event loop wake the tails of `session_ids`, only
        if any waits (a tail subscribes before it reads, so none misses a commit)."""
        if self.feeds or any(sid in self.tails for sid in session_ids):
            self.loop.call_soon_threadsafe(self._wake, session_ids)

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
                            ids, self._outbox = [sid.hex for sid in self._outbox], set()
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
                            self._wake_soon([uuid.UUID(h) for h in note.payload.split(",") if h])
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
                self._wake(list({sid for _, sid in rows}))

    def _wake_all(self) -> None:
        for woken in self.feeds:
            woken.set()
        self._wake(list(self.tails))

    def _last_position(self) -> int:
        return self._views.last_event_position()

    def _written_after(self, position: int) -> list[tuple[int, uuid.UUID]]:
        return self._views.events_written_after(position, 10_000)

    @property
    def _views(self) -> SQLViews:
        return cast(SQLViews, self.ledger.recorder)
