"""`LedgerSessionService`: Google ADK's `BaseSessionService` kept in the ledger.

An ADK session is a ledger session under the key `adk/<app>/<user>/<session id>` (each
part percent-encoded) in the service's tenant. Its first message, made by
`create_session`, holds the session's own state; each `append_event` is ONE ledger
message (one `MessagesAppended` event) whose `additional_kwargs["adk_event"]` is the
ADK event whole (`Event.model_dump(mode="json", exclude_none=True)`: content, function
calls and responses, actions and their state delta, author, invocation id, timestamp),
and whose role and blocks show it readably (text, tool calls, tool results) for the
viewer and the ledger's windowed `get`.

State, in ADK's three scopes:
- session state: a message that changes it carries the whole session state after it
  (`adk_state`); every other message names the position of the one that does
  (`adk_state_at`), so a read of the newest events needs nothing older;
- `app:` and `user:` state: one message each under `adk-app/<app>` and
  `adk-user/<app>/<user>`, replaced (`set`) by a change, so the old values stay in
  the audit trail; a change retries on a lost race and loses nothing;
- `temp:` keys never reach the ledger (ADK's base class trims them from the event).

`delete_session` clears the ledger session (`HistoryCleared`): the events stay in the
audit trail, replay and export; erasure (`Ledger.erase`) remains the way to destroy
them. An erased session's `get_session` and `append_event` raise the ledger's
`SessionErasedError` (when, why, on what basis); its `delete_session` does nothing.

ADK's stale-session check: a session this service returned carries the ledger version
it was read at, and an append to a session that moved since raises `StaleSessionError`
(a write at an expected version: nothing is stored). An event's id is its write's
idempotency key: a session stores each id once, and an append made again after its
answer was lost answers as the first did.

The app and user state documents are separate ledger sessions, written after the event:
a crash between the two leaves the event (whose `state_delta` is the record of the
change) without its effect on the shared state, until the append is made again.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import threading
import time
import uuid
import weakref
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, NamedTuple, TypeVar
from urllib.parse import unquote

from google.adk.errors import StaleSessionError
from google.adk.errors.already_exists_error import AlreadyExistsError
from google.adk.errors.session_not_found_error import SessionNotFoundError
from google.adk.events.event import Event

# ADK's own split of a state delta into its scopes (`app:`, `user:`, the session's; `temp:`
# dropped), values made JSON-safe as its database service makes them: the one private
# name the adapter uses, so that state is kept exactly as ADK's services keep it (the
# google-adk pin, <3, covers it; the ADK suite in tests/sdk_suites checks it).
from google.adk.sessions import _session_util
from google.adk.sessions.base_session_service import (
    BaseSessionService,
    GetSessionConfig,
    ListSessionsResponse,
)
from google.adk.sessions.session import Session
from google.adk.sessions.state import State

from session_ledger.domain.errors import (
    IdempotencyKeyReused,
    InvalidInput,
    SessionErasedError,
    VersionConflict,
)
from session_ledger.domain.ledger import Ledger

from . import layout
from .store import Head, Store, open_store

T = TypeVar("T")

STATE_RETRIES = 50  # attempts of an app or user state change that loses a race
READ_RETRIES = 20  # attempts of a read whose session moved between its two reads
PAGE = 100  # the newest events a read of `after_timestamp` takes first
READERS = 4  # threads reading the app's and user's state while the session is read
KNOWN_SESSIONS = 4096  # sessions and shared states whose last known version is kept

_STALE = (
    "The session has been modified in storage since it was loaded. "
    "Please reload the session before appending more events."
)


class _Known(NamedTuple):
    """A session as this service last wrote or read it: its version, its message count,
    the position of the message holding its own state, and that state (None: not read).
    Valid while the session is at that version: a read of the same version, or a write
    expecting it, needs nothing more."""

    version: int
    message_count: int
    state_at: int
    state: dict[str, Any] | None


class LedgerSessionService(BaseSessionService):
    """ADK sessions in the session ledger: in this process (`ledger=` or a database
    `url=`) or on a server (`url="http(s)://..."`, `api_key=` or `LEDGER_API_KEY`)."""

    def __init__(
        self, *, ledger: Ledger | None = None, url: str | None = None,
        api_key: str | None = None, tenant: str | None = None, actor: str | None = None,
        store: Store | None = None,
    ) -> None:  # fmt: skip
        """`tenant` and `actor` in process only: a server takes both from the API key."""
        self.store = store or open_store(ledger, url, api_key, tenant, actor)
        # What this service last wrote or read of each session and shared state, and at
        # which version: a read whose answer is of that version needs no other
        # (`_Known`). In process only: over HTTP a read does not say its version.
        self._known: dict[str, _Known] = {}
        self._shared: dict[str, tuple[int, dict[str, Any]]] = {}
        self._lock = threading.Lock()
        self._readers: ThreadPoolExecutor | None = None  # made on first use
        # Each session's appends in this process, taken in turn as ADK's database service
        # takes them (one lock a session while any append to it waits)
        # (an asyncio lock serves one event loop: each loop's appends are taken in turn)
        self._appending: weakref.WeakValueDictionary[tuple[int, str, str, str], asyncio.Lock] = (
            weakref.WeakValueDictionary()
        )

    async def close(self) -> None:
        """Stop the threads reading shared state and close the connections to a server
        (an in-process ledger outlives the service: its owner closes it)."""
        with self._lock:
            pool, self._readers = self._readers, None
        if pool is not None:
            pool.shutdown(wait=False)
        close = getattr(self.store, "close", None)
        if close is not None:
            await asyncio.to_thread(close)

    def _pool(self) -> ThreadPoolExecutor:
        with self._lock:
            if self._readers is None:
                self._readers = ThreadPoolExecutor(READERS, thread_name_prefix="adk-ledger-read")
            return self._readers

    async def __aenter__(self) -> LedgerSessionService:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- BaseSessionService ------------------------------------------------------------

    async def create_session(
        self, *, app_name: str, user_id: str, state: dict[str, Any] | None = None,
        session_id: str | None = None,
    ) -> Session:  # fmt: skip
        return await _thread(self._create, app_name, user_id, state, session_id)

    async def get_session(
        self, *, app_name: str, user_id: str, session_id: str,
        config: GetSessionConfig | None = None,
    ) -> Session | None:  # fmt: skip
        return await _thread(self._get, app_name, user_id, session_id, config)

    async def list_sessions(
        self, *, app_name: str, user_id: str | None = None
    ) -> ListSessionsResponse:
        return await _thread(self._list, app_name, user_id)

    async def delete_session(self, *, app_name: str, user_id: str, session_id: str) -> None:
        await _thread(self._delete, app_name, user_id, session_id)

    async def get_user_state(self, *, app_name: str, user_id: str) -> dict[str, Any]:
        return await _thread(
            self._shared_state, layout.user_key(layout.name(app_name), layout.name(user_id))
        )

    async def append_event(self, session: Session, event: Event) -> Event:
        """Store `event` and add it to `session`. Appends to one session are taken in turn
        (several at once on one session object would otherwise all expect the version it
        was read at, and all but one be refused as stale). A session stores each event id
        once (the id is the write's idempotency key): an append made again answers as
        the first did, whether or not the first's answer arrived; one stored before the
        session object was read leaves the object as it is; and another event with a
        stored id raises AlreadyExistsError, as ADK's database service refuses it."""
        if event.partial:
            return event
        loop = id(asyncio.get_running_loop())
        key = (loop, session.app_name, session.user_id, session.id)
        turn = self._appending.setdefault(key, asyncio.Lock())
        async with turn:
            if any(e == event for e in session.events if e.id == event.id):
                return event
            self._apply_temp_state(session, event)
            event = self._trim_temp_delta_state(event)
            # Awaited to its end even if the caller is cancelled meanwhile: the next
            # append in turn must find the session object as this one left it.
            if not await _settled(self._append, session, event):
                return event
            return self._commit_event_to_session(session, event)

    # -- the operations, each run in a worker thread -------------------------------------

    def _create(
        self, app_name: str, user_id: str, state: dict[str, Any] | None, session_id: str | None
    ) -> Session:
        app, user = layout.name(app_name), layout.name(user_id)
        if session_id is not None and not isinstance(session_id, str):
            raise InvalidInput(f"session_id must be a string; got {type(session_id).__name__}")
        if state is not None and not isinstance(state, dict):
            raise InvalidInput(f"state must be a dict; got {type(state).__name__}")
        sid = (session_id.strip() if session_id else None) or str(uuid.uuid4())
        deltas = _session_util.extract_json_safe_state_delta(state or {})
        key = layout.session_key(app, user, sid)
        head = self.store.head(key)
        if head is not None and not head.cleared and head.message_count:
            # (one that holds no message is none, as `_get` reads it; an erased one is
            # refused by the write below)
            raise AlreadyExistsError(f"Session with id {sid} already exists.")
        now = time.time()
        first = layout.message(
            "system", [], {layout.SESSION: {"create_time": now}, layout.STATE: deltas["session"]}
        )
        self._check_shared(app, user, deltas["app"], deltas["user"])
        try:
            written = self.store.append(key, [first], head.version if head else 0)
        except VersionConflict:
            raise AlreadyExistsError(f"Session with id {sid} already exists.") from None
        app_state, user_state = self._change_shared(app, user, deltas["app"], deltas["user"])
        session = Session(
            app_name=app, user_id=user, id=sid, last_update_time=now,
            state=_merge(app_state, user_state, deltas["session"]),
        )  # fmt: skip
        session._storage_update_marker = _marker(written, 0)
        self._remember(key, _Known(written.version, written.message_count, 0, deltas["session"]))
        return session

    def _get(
        self, app_name: str, user_id: str, session_id: str, config: GetSessionConfig | None
    ) -> Session | None:
        if _no_id(session_id):
            return None
        app, user, sid = layout.name(app_name), layout.name(user_id), layout.session_id(session_id)
        config = config or GetSessionConfig()
        key = layout.session_key(app, user, sid)
        # The app's and the user's state are read meanwhile, each on a connection of its own
        shared = [
            self._pool().submit(self._shared_state, k)
            for k in (layout.app_key(app), layout.user_key(app, user))
        ]
        known = self._known.get(key) if self.store.reads_versions else None
        for attempt in range(READ_RETRIES):
            if attempt == 0 and known is not None and config.after_timestamp is None:
                # As this service left it: one read tells whether it still is
                head = Head(known.version, known.message_count, False)
            else:
                known, head = None, self.store.head(key)  # type: ignore[assignment]
                if head is None or head.cleared or head.message_count == 0:
                    return None
            found = self._read(key, head, config)
            if found is None:
                continue  # the session moved between the reads: again
            messages, offset, last, state_at = found
            state = self._state_of(key, messages, offset, state_at, self._known.get(key), head)
            if state is None:
                continue
            self._remember(key, _Known(head.version, head.message_count, state_at, state))
            after = config.after_timestamp  # (events before it are not made)
            events = [
                Event.model_validate(m[layout.EVENT]) for m in messages
                if layout.EVENT in m and (after is None or m[layout.EVENT]["timestamp"] >= after)
            ]  # fmt: skip
            app_state, user_state = (f.result() for f in shared)
            session = Session(
                app_name=app, user_id=user, id=sid, events=events,
                state=_merge(app_state, user_state, state), last_update_time=layout.time_of(last),
            )  # fmt: skip
            session._storage_update_marker = _marker(head, state_at)
            return session
        raise VersionConflict(key, 0, -1)  # (written to without pause by others throughout)

    def _read(
        self, key: str, head: Head, config: GetSessionConfig
    ) -> tuple[list[dict[str, Any]], int, dict[str, Any], int] | None:
        """The messages `config` asks for (`additional_kwargs` of each), the position of
        the first, the newest message's and where the state is; None if the session
        moved between reads."""
        count, wanted = head.message_count, config.num_recent_events
        if wanted is None and config.after_timestamp is not None:
            return self._read_after(key, head, config.after_timestamp)
        offset = 0 if wanted is None else max(1, count - wanted)
        # At least the newest message: the session's time and where its state is
        offset = min(offset, count - 1)
        found = self.store.newest(key, head, count - offset)
        if found is None:
            return None
        kwargs = [m["additional_kwargs"] for m in found]
        last = kwargs[-1]
        if wanted == 0:
            kwargs = []
        return kwargs, offset, last, layout.state_at(last, count - 1)

    def _read_after(
        self, key: str, head: Head, after: float
    ) -> tuple[list[dict[str, Any]], int, dict[str, Any], int] | None:
        """The messages of events at or after `after`: the newest `PAGE`, then the newest
        twice as many (only those not yet read decoded), each one read of the newest rows
        at `head`, until one is older (events are appended in time order) or all are
        read. However long the session, the rows decoded stay within twice those it
        returns (or `PAGE`), and the rows read within twice those decoded."""
        count, kept = head.message_count, []
        n = min(PAGE, count)
        while True:
            found = self.store.newest(key, head, n, skip=len(kept))
            if found is None:
                return None
            page = [m["additional_kwargs"] for m in found]
            kept[:0] = page
            if n == count or any(
                layout.EVENT in m and m[layout.EVENT]["timestamp"] < after for m in page
            ):
                break
            n = min(2 * n, count)
        return kept, count - n, kept[-1], layout.state_at(kept[-1], count - 1)

    def _state_of(
        self, key: str, messages: list[dict[str, Any]], offset: int, state_at: int,
        known: _Known | None, head: Head,
    ) -> dict[str, Any] | None:  # fmt: skip
        """The session's own state: in the messages read, as this service knew it at the
        same version, or read at `state_at`."""
        if offset <= state_at < offset + len(messages):
            return dict(messages[state_at - offset][layout.STATE])
        if known is not None and known.state is not None and known.version == head.version:
            return copy.deepcopy(known.state)
        found, _ = self.store.messages(key, state_at, 1)
        if not found or layout.STATE not in found[0]["additional_kwargs"]:
            return None
        return dict(found[0]["additional_kwargs"][layout.STATE])

    def _list(self, app_name: str, user_id: str | None) -> ListSessionsResponse:
        app = layout.name(app_name)
        mine = "" if user_id is None else f"{layout.part(layout.name(user_id))}/"
        prefix = f"{layout.SESSIONS}{layout.part(app)}/{mine}"
        sessions = []
        for key in self.store.keys(prefix):
            user, sid = (unquote(p) for p in key[len(layout.SESSIONS) :].split("/")[1:3])
            if user_id is not None and user != user_id:
                continue
            got = self._get(app, user, sid, GetSessionConfig(num_recent_events=0))
            if got is None:
                continue  # (deleted since the keys were read)
            sessions.append(got)
        sessions.sort(key=lambda s: (s.last_update_time, s.user_id, s.id))
        return ListSessionsResponse(sessions=sessions)

    def _delete(self, app_name: str, user_id: str, session_id: str) -> None:
        if _no_id(session_id):
            return
        key = layout.session_key(
            layout.name(app_name), layout.name(user_id), layout.session_id(session_id)
        )
        head = self.store.head(key)
        if head is None or head.cleared:
            return
        try:
            self.store.clear(key, None)
        except SessionErasedError:
            return  # (erased: more gone than a delete makes it)

    def _append(self, session: Session, event: Event) -> bool:
        """Store `event`; false if it was stored before `session` was read."""
        app, user, sid = layout.name(session.app_name), layout.name(session.user_id), session.id
        key = layout.session_key(app, user, sid)
        version, count, state_at = self._position(key, session)
        delta = event.actions.state_delta if event.actions and event.actions.state_delta else {}
        deltas = _session_util.extract_json_safe_state_delta(delta)
        extra: dict[str, Any]
        known = self._known.get(key)
        state = known.state if known is not None and known.version == version else None
        if deltas["session"]:
            if state is None:
                state = self._state_of(key, [], 0, state_at, None, Head(version, count, False))
            if state is None:
                raise StaleSessionError(_STALE)
            state = {**state, **deltas["session"]}
            extra, state_at = {layout.STATE: state}, count
        else:
            extra = {layout.STATE_AT: state_at}
        self._check_shared(app, user, deltas["app"], deltas["user"])
        message = layout.to_message(event, extra)
        try:
            written = self._append_once(key, message, version, event.id)
        except IdempotencyKeyReused:
            raise AlreadyExistsError(f"Event {event.id} already exists in session {sid}.") from None
        except VersionConflict:
            head = self.store.head(key)
            if head is None or head.cleared:
                raise SessionNotFoundError(f"Session {sid} not found.") from None
            raise StaleSessionError(_STALE) from None
        if written is None:
            return False  # (its effects are in what the session was read with)
        if deltas["app"]:
            self._change_one(layout.app_key(app), deltas["app"])
        if deltas["user"]:
            self._change_one(layout.user_key(app, user), deltas["user"])
        session.last_update_time = event.timestamp
        session._storage_update_marker = _marker(written, state_at)
        self._remember(key, _Known(written.version, written.message_count, state_at, state))
        return True

    def _append_once(
        self, key: str, message: dict[str, Any], version: int, event_id: str
    ) -> Head | None:
        """Write an event's message under its id's key (`event_write_key`), once in the
        session's life (since it was last created); None if this life holds it already,
        stored before the session object was read at `version`. A deleted session's
        events keep their keys: an id of an earlier life is written again under a key of
        this one. (Told apart only when the id's key is found used, which is rare.)"""
        try:
            written = self.store.append(key, [message], version, layout.event_write_key(event_id))
        except IdempotencyKeyReused:
            if self._holds_event(key, version, event_id):
                raise  # (another event of this life has the id)
        else:
            if not written.replayed or written.version > version:
                return written  # new, or this append's own retry (its answer lost)
            if self._life(key, written.version) == self._life(key, version):
                return None
        life_key = layout.event_write_key(event_id, self._life(key, version))
        written = self.store.append(key, [message], version, life_key)
        return None if written.replayed and written.version <= version else written

    def _life(self, key: str, version: int) -> str | None:
        """The life the session was in at `version` (`layout.life_of`)."""
        found, _ = self.store.messages(key, 0, 1, as_of_version=version)
        return layout.life_of(found[0]["additional_kwargs"]) if found else None

    def _holds_event(self, key: str, version: int, event_id: str) -> bool:
        """Whether the session's life at `version` holds an event `event_id`."""
        found, _ = self.store.messages(key, 0, None, as_of_version=version)
        return any(
            m["additional_kwargs"].get(layout.EVENT, {}).get("id") == event_id for m in found
        )

    def _remember(self, key: str, known: _Known) -> None:
        """Keep `known` (a copy of its state: the session handed out holds the same values)."""
        if not self.store.reads_versions:
            return
        known = known._replace(state=copy.deepcopy(known.state))
        with self._lock:
            self._known.pop(key, None)
            self._known[key] = known
            if len(self._known) > KNOWN_SESSIONS:
                del self._known[next(iter(self._known))]  # (the longest unused)

    def _position(self, key: str, session: Session) -> tuple[int, int, int]:
        """The version, message count and state position `session` was read at: from
        the marker this service gave it, else (a session made elsewhere) from the store,
        as ADK's database service does: stale when the store holds a later event."""
        marker = session._storage_update_marker
        if marker is not None:
            try:
                version, count, state_at = (int(p) for p in marker.split(":"))
            except ValueError:
                raise StaleSessionError(_STALE) from None
            return version, count, state_at
        head = self.store.head(key)
        if head is None or head.cleared or head.message_count == 0:
            raise SessionNotFoundError(f"Session {session.id} not found.")
        found, _ = self.store.messages(key, head.message_count - 1, 1)
        if not found:
            raise StaleSessionError(_STALE)
        last = found[0]["additional_kwargs"]
        if layout.time_of(last) > session.last_update_time:
            stored_id = last[layout.EVENT]["id"] if layout.EVENT in last else None
            held_id = session.events[-1].id if session.events else None
            if stored_id != held_id:
                raise StaleSessionError(_STALE)
        return head.version, head.message_count, layout.state_at(last, head.message_count - 1)

    # -- app and user state -------------------------------------------------------------

    def _shared_state(self, key: str) -> dict[str, Any]:
        """An app's or user's state (a copy: the caller may change it)."""
        if not self.store.reads_versions:
            found, _ = self.store.messages(key, 0, 1)
            return dict(found[0]["additional_kwargs"][layout.SHARED_STATE]) if found else {}
        head = self.store.head(key)
        if head is None or head.message_count == 0:
            return {}
        cached = self._shared.get(key)
        if cached is None or cached[0] != head.version:
            found, version = self.store.messages(key, 0, 1)
            if not found:
                return {}
            cached = (version, found[0]["additional_kwargs"][layout.SHARED_STATE])
            self._keep_shared(key, cached)
        return copy.deepcopy(cached[1])

    def _keep_shared(self, key: str, found: tuple[int, dict[str, Any]]) -> None:
        with self._lock:
            self._shared.pop(key, None)
            self._shared[key] = found
            if len(self._shared) > KNOWN_SESSIONS:
                del self._shared[next(iter(self._shared))]

    def _change_shared(
        self, app: str, user: str, app_delta: dict[str, Any], user_delta: dict[str, Any]
    ) -> tuple[dict[str, Any], dict[str, Any]]:
        """Apply the `app:` and `user:` changes; both states after them."""
        return (
            self._change_one(layout.app_key(app), app_delta),
            self._change_one(layout.user_key(app, user), user_delta),
        )

    def _check_shared(
        self, app: str, user: str, app_delta: dict[str, Any], user_delta: dict[str, Any]
    ) -> None:
        """Refuse, before the session's own write, an `app:` or `user:` change that its
        write after it would refuse (a value that is not JSON; in process, a state grown
        past the message size limit): the event is stored with its effect or not at all."""
        for key, delta in ((layout.app_key(app), app_delta),
                           (layout.user_key(app, user), user_delta)):  # fmt: skip
            if delta:
                state = {**self._shared_state(key), **delta}
                self.store.check([layout.message("system", [], {layout.SHARED_STATE: state})])

    def _change_one(self, key: str, delta: dict[str, Any]) -> dict[str, Any]:
        """The app's or user's state after `delta` (a read alone when it is empty)."""
        if not delta:
            return self._shared_state(key)
        for _ in range(STATE_RETRIES):
            head = self.store.head(key)
            state = self._shared_state(key) if head and head.message_count else {}
            state.update(delta)
            message = layout.message("system", [], {layout.SHARED_STATE: state})
            try:
                written = self.store.replace(key, [message], head.version if head else 0)
            except VersionConflict:
                continue  # another writer changed it first: read it again
            if self.store.reads_versions:
                self._keep_shared(key, (written.version, copy.deepcopy(state)))
            return state
        raise VersionConflict(key, 0, -1)


def _no_id(session_id: object) -> bool:
    """None, empty or blank: no session has such an id (create_session gives one of its
    own instead), so it is read as none, as ADK's services read it."""
    return session_id is None or (isinstance(session_id, str) and not session_id.strip())


def _marker(head: Head, state_at: int) -> str:
    """The storage revision ADK's stale-session check compares: the ledger version, and
    the message count and state position at that version."""
    return f"{head.version}:{head.message_count}:{state_at}"


def _merge(
    app_state: dict[str, Any], user_state: dict[str, Any], session_state: dict[str, Any]
) -> dict[str, Any]:
    merged = dict(session_state)
    merged.update({State.APP_PREFIX + k: v for k, v in app_state.items()})
    merged.update({State.USER_PREFIX + k: v for k, v in user_state.items()})
    return merged


async def _thread(call: Callable[..., T], *args: Any) -> T:
    return await asyncio.to_thread(call, *args)


async def _settled(call: Callable[..., T], *args: Any) -> T:
    """`call(*args)` in a worker thread, awaited to its end even if the caller is
    cancelled meanwhile; then the cancellation is raised."""
    work = asyncio.ensure_future(asyncio.to_thread(call, *args))
    try:
        return await asyncio.shield(work)
    except asyncio.CancelledError:
        while not work.done():
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait({work})
        if not work.cancelled():
            work.exception()  # (retrieved: the cancellation is what the caller hears)
        raise
