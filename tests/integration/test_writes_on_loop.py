"""PostgreSQL writes on the event loop (`deps.short_write` runs a write alone under
`async_bridge.bridged`), against a real server: a write run there stores what the same
write stores from a thread, and every wait of it is on the loop's pool: its append, the
library's load of a session's snapshot and events, a snapshot it takes, the reload after
a race lost to another process. The API writes this way when a write is alone."""

from __future__ import annotations

import asyncio
import uuid
from pathlib import Path

import httpx
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage
from session_ledger.domain.session import session_id
from session_ledger.projections.async_bridge import bridged
from tests.conftest import make_ledger, make_settings
from tests.integration.test_reads_on_loop import in_a_loop, recorder

MESSAGE = {"messages": [{"role": "user", "content": "hello"}]}


def writes(ledger: Ledger, key: str) -> None:
    """A session's life: made by its first write, appended to from the cache and, once
    the cache is cleared, from its snapshot and the events after it; set, reset, set."""
    for i in range(7):  # a snapshot every 4 events: at versions 4 and 8
        ledger.put(key, ChatMessage.text("user" if i % 2 else "assistant", f"turn {i}"))
        if i == 4:
            ledger.repository.cache.clear()  # the next write loads, from snapshot 4
    ledger.set(key, [ChatMessage.text("user", "kept"), ChatMessage.text("user", "new")])
    ledger.reset(key)
    ledger.set(key, [ChatMessage.text("system", "again")])


def stored(ledger: Ledger, key: str) -> tuple[object, ...]:
    """What a session holds, whoever wrote it: its events' types and versions, its
    snapshots' versions, its transcript and window."""
    sid = session_id(ledger.default_tenant, key)
    events = [(type(e).__name__, e.originator_version) for e in ledger.events.get(sid)]
    snapshots = [s.originator_version for s in ledger.snapshots.get(sid)]
    history = [(m.role, m.content) for m in ledger.history(key).messages()]
    window = [(m.role, m.content) for m in ledger.window(key, token_limit=50).messages()]
    return events, snapshots, history, window, ledger.head(key).version


def test_a_write_on_the_loop_stores_what_a_thread_stores_waiting_only_there(
    tmp_path: Path,
) -> None:
    ledger = make_ledger(make_settings("postgres", tmp_path, snapshot_interval=4))
    try:
        threads = recorder(ledger).datastore.pool
        asked = threads.get_stats().get("requests_num", 0)

        async def main() -> int:
            await bridged(lambda: writes(ledger, "on-loop"))
            loop_pool = recorder(ledger).loop_pool.pool
            assert loop_pool is not None
            return int(loop_pool.get_stats()["requests_num"])

        asked_of_loop_pool = in_a_loop(ledger, main)
        assert threads.get_stats().get("requests_num", 0) == asked  # not one of its
        assert asked_of_loop_pool >= 12
        writes(ledger, "in-thread")
        on_loop = stored(ledger, "on-loop")
        assert on_loop == stored(ledger, "in-thread")
        assert on_loop[1] == [4, 8]  # the snapshots were taken on the loop too
    finally:
        ledger.close()


def test_a_race_lost_on_the_loop_reloads_there_and_writes_again(tmp_path: Path) -> None:
    settings = make_settings("postgres", tmp_path)
    this, other = make_ledger(settings), make_ledger(settings)  # two processes
    try:
        this.put("chat", ChatMessage.text("user", "one"))  # cached here at version 2
        other.put("chat", ChatMessage.text("user", "two"))  # version 3, from the other
        threads = recorder(this).datastore.pool
        asked = threads.get_stats().get("requests_num", 0)

        async def main() -> int:
            written = await bridged(lambda: this.put("chat", ChatMessage.text("user", "three")))
            return written.version

        assert in_a_loop(this, main) == 4
        assert threads.get_stats().get("requests_num", 0) == asked  # the reload too
        assert [m.content for m in this.history("chat").messages()] == ["one", "two", "three"]
    finally:
        this.close()
        other.close()


def test_the_api_writes_alone_on_the_loop(tmp_path: Path) -> None:
    keys = MemoryKeyStore()
    _, secret = keys.create(f"t-{uuid.uuid4().hex[:12]}", "agent")
    settings = make_settings("postgres", tmp_path, quota_tenant_sessions=2)
    make_ledger(settings).close()  # the tables
    app = create_app(settings, key_store=keys)
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
        assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
        threads = recorder(app.state.ledger).datastore.pool
        asked = threads.get_stats().get("requests_num", 0)
        for _ in range(3):
            answer = client.post("/v1/sessions/chat/messages", json=MESSAGE)
            assert answer.status_code == 200, answer.text
        assert answer.json()["version"] == 5
        assert threads.get_stats().get("requests_num", 0) == asked
        # A session's quota is counted in a worker thread (the limits' store blocks).
        assert client.post("/v1/sessions/second/messages", json=MESSAGE).status_code == 200
        refused = client.post("/v1/sessions/third/messages", json=MESSAGE)
        assert refused.status_code == 429, refused.text
        assert client.get("/v1/sessions/third/context").status_code == 404


def test_writes_that_arrive_together_go_to_threads(tmp_path: Path) -> None:
    """Only a write alone runs on the loop: with others in flight it goes to a thread,
    where its blocking parts (a lost race's back-off) hold no one else."""
    keys = MemoryKeyStore()
    _, secret = keys.create(f"t-{uuid.uuid4().hex[:12]}", "agent")
    settings = make_settings("postgres", tmp_path)
    make_ledger(settings).close()
    app = create_app(settings, key_store=keys)
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
        assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
        threads = recorder(app.state.ledger).datastore.pool
        asked = threads.get_stats().get("requests_num", 0)

        async def together() -> list[int]:
            transport = httpx.ASGITransport(app=app)
            headers = {"Authorization": f"Bearer {secret}"}
            async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
                answers = await asyncio.gather(*(
                    c.post(f"/v1/sessions/s-{i}/messages", json=MESSAGE, headers=headers)
                    for i in range(8)
                ))  # fmt: skip
            return [a.status_code for a in answers]

        assert client.portal.call(together) == [200] * 8
        assert threads.get_stats().get("requests_num", 0) > asked
