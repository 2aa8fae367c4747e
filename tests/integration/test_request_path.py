"""What one request costs the API around the ledger, counted: the caller is authenticated
once however many dependencies ask for it, and a write makes at most one hand-off to a
worker thread (FastAPI would validate a returned model again in a second one): none on
SQLite when no other request is in flight (`deps.short_write`), and the writes of a burst
each see the others in flight, so they can share a group commit."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from tests.memory_api import memory_api

MESSAGE = {"messages": [{"role": "user", "content": "hello"}]}


class Counted:
    def __init__(self) -> None:
        self.calls = 0

    def wrap(self, function: Any) -> Any:
        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls += 1
            return function(*args, **kwargs)

        return counted


@pytest.fixture
def api() -> Iterator[tuple[TestClient, MemoryKeyStore]]:
    # (an admin's reads are access-logged too)
    with memory_api(tenant="acme", access_log=True) as served:
        yield served.client, served.keys


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("post", "/v1/sessions/chat/messages"),
        ("get", "/v1/sessions/chat/context"),
        ("get", "/v1/sessions/chat/messages"),
        ("get", "/v1/sessions/chat/events"),
        ("get", "/v1/keys"),
    ],
)
def test_a_request_checks_its_key_once(
    api: tuple[TestClient, MemoryKeyStore], monkeypatch: pytest.MonkeyPatch, method: str,
    path: str,
) -> None:  # fmt: skip
    client, store = api
    assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
    checks = Counted()
    monkeypatch.setattr(store, "cached", checks.wrap(store.cached))
    monkeypatch.setattr(store, "authenticate", checks.wrap(store.authenticate))
    kwargs = {"json": MESSAGE} if method == "post" else {}
    assert getattr(client, method)(path, **kwargs).status_code == 200
    assert checks.calls == 1


@pytest.mark.parametrize("others_in_flight", [0, 1])
def test_a_write_alone_runs_on_the_event_loop_else_in_one_worker_thread(
    api: tuple[TestClient, MemoryKeyStore], monkeypatch: pytest.MonkeyPatch,
    others_in_flight: int,
) -> None:  # fmt: skip
    import anyio.to_thread

    client, _ = api  # memory:// is a SQLite store: its calls do not wait on a server
    assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
    handoffs = Counted()
    monkeypatch.setattr(
        anyio.to_thread, "run_sync", _async_counted(handoffs, anyio.to_thread.run_sync)
    )
    metrics = client.app.state.metrics  # type: ignore[attr-defined]
    metrics.in_flight += others_in_flight  # as if another request were being answered
    try:
        answer = client.post("/v1/sessions/chat/messages", json=MESSAGE)
    finally:
        metrics.in_flight -= others_in_flight
    assert answer.status_code == 200
    body = answer.json()
    assert (body["message_count"], body["replayed"], body["removed"]) == (2, False, [])
    assert answer.headers["ETag"] == f'"{body["version"]}"'
    assert handoffs.calls == others_in_flight


def test_writes_that_arrive_together_are_handed_off_to_share_a_commit(
    api: tuple[TestClient, MemoryKeyStore], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each write of a burst must see the others in flight: run on the loop one after
    another, they would each wait for a commit of their own."""
    from session_ledger.api import deps

    client, store = api
    _, secret = store.create("acme", "agent")
    handoffs = Counted()  # the writes' hand-offs only
    monkeypatch.setattr(deps, "run_in_threadpool", _async_counted(handoffs, deps.run_in_threadpool))

    async def post(i: int) -> int:  # as uvicorn calls the app: the body already read
        body = json.dumps(MESSAGE).encode()
        scope = {
            "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1",
            "method": "POST", "scheme": "http", "path": f"/v1/sessions/burst-{i}/messages",
            "raw_path": f"/v1/sessions/burst-{i}/messages".encode(), "query_string": b"",
            "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
            "headers": [(b"host", b"ledger"), (b"authorization", f"Bearer {secret}".encode()),
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode())],
        }  # fmt: skip
        sent: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": body, "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            sent.append(message)

        await client.app(scope, receive, send)  # type: ignore[attr-defined]
        return int(sent[0]["status"])

    async def burst() -> list[int]:
        first = await post(-1)  # alone: on the loop; and now the key is in the cache
        return [first, *await asyncio.gather(*(post(i) for i in range(8)))]

    assert client.portal.call(burst) == [200] * 9  # type: ignore[union-attr]
    assert handoffs.calls == 8


def _async_counted(counter: Counted, function: Any) -> Any:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        counter.calls += 1
        return await function(*args, **kwargs)

    return counted


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_a_large_write_alone_runs_in_a_worker_thread_its_body_decoded_in_one(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Any, store: str
) -> None:
    """Over `loop_write_max_bytes` a write's CPU (its body's decoding, parsing, token
    counts, hashing) never runs on the event loop, even alone; at or under it, it does."""
    import anyio.to_thread

    from tests.conftest import make_ledger, make_settings

    settings = make_settings(store, tmp_path, loop_write_max_bytes=2048)
    make_ledger(settings).close()  # the tables; the app opens its own (PostgreSQL: bridged)
    keys = MemoryKeyStore()
    _, secret = keys.create(settings.default_tenant, "agent")
    app = create_app(settings, key_store=keys)
    writes, decodes = Counted(), Counted()
    to_thread = anyio.to_thread.run_sync
    monkeypatch.setattr(anyio.to_thread, "run_sync", _async_counted(writes, to_thread))
    monkeypatch.setattr(asyncio, "to_thread", _async_counted(decodes, asyncio.to_thread))
    large = {"messages": [{"role": "user", "content": "word " * 600}]}
    with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
        assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
        writes.calls = decodes.calls = 0  # a session's first write counts its quota aside
        assert client.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
        assert (writes.calls, decodes.calls) == (0, 0)  # small and alone: on the loop
        answer = client.post("/v1/sessions/chat/messages", json=large)
        assert answer.status_code == 200, answer.text
        assert (writes.calls, decodes.calls) == (1, 1)
        history = client.get("/v1/sessions/chat/messages").json()["messages"]
        assert history[-1]["blocks"][0]["text"] == "word " * 600


@pytest.mark.parametrize("given", ["1796564678", "1796564678000", " 17 ", "-5", "1.5e9"])
def test_a_time_given_as_a_number_is_refused_not_read_as_seconds(given: str) -> None:
    """A time is ISO 8601: a number (which pydantic reads as seconds or milliseconds
    since 1970, whichever its size suggests) is a 422 that says so, on every time a route
    takes."""
    with memory_api(tenant="acme") as api:
        body = {"messages": [{"role": "user", "content": "hi"}]}
        assert api.client.post("/v1/sessions/s/messages", json=body).status_code == 200
        for path, name in (("/v1/sessions/s/messages", "as_of"), ("/v1/events", "from"),
                           ("/v1/package", "to")):  # fmt: skip
            answer = api.client.get(path, params={name: given, "type": "MessagesAppended"})
            assert answer.status_code == 422, (path, answer.text)
            assert "ISO 8601" in answer.json()["error"]["message"], answer.text
        day = api.client.get("/v1/sessions/s/messages", params={"as_of": "2999-01-01"})
        assert day.status_code == 200  # (a date alone: its midnight, UTC)
