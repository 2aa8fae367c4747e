"""A request's body is read only once its caller is authenticated, and a write's messages
are counted before they are validated.

FastAPI reads and decodes a route's JSON body before the route's dependencies run, and
authentication (`admission.enforce_limits`) is one of them: a caller with no key, or a
wrong one, made the server decode 40 MB of `{"messages": [{}, {}, ...]}` (13.6 million
objects: 15 s of CPU, 0.8 GB) before its 401. `middleware.AuthenticatedBodies`
authenticates at the first read of the body; `large_bodies.py` stops decoding a write's
messages at the first one over `max_messages_per_write` (413). The tests count what the
server did (reads of the body, decoder calls, key lookups), never how long it took.
"""

from __future__ import annotations

import asyncio
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from fastapi import FastAPI
from fastapi.testclient import TestClient

from session_ledger.api import large_bodies
from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings
from session_ledger.domain.errors import PayloadTooLarge
from tests.integration.test_request_path import Counted
from tests.memory_api import memory_api

MAX_MESSAGES = 50
LOOP_MAX = 2048  # a body over it is decoded in a worker thread, in parts
MALFORMED = b'{"messages": [{}, {}, '  # a 400 malformed_json, were it decoded
BAD_KEY = "sl_not_a_real_key_000000000000000000"
PATH_VALUES = {"key": "chat", "stream_id": "s1", "key_id": "k1", "index": "0"}


class Api:
    def __init__(self, app: FastAPI, client: TestClient, keys: MemoryKeyStore, admin: str):
        self.app, self.client, self.keys, self.admin = app, client, keys, admin

    @property
    def auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.admin}"}


@pytest.fixture
def api() -> Iterator[Api]:
    with memory_api(
        headers={"Content-Type": "application/json"}, max_messages_per_write=MAX_MESSAGES,
        loop_write_max_bytes=LOOP_MAX, auth_failures_per_second=0.0001,
        auth_failures_burst=1000,
    ) as served:  # fmt: skip
        yield Api(served.app, served.client, served.keys, served.secret)


def body_operations(app: FastAPI) -> list[tuple[str, str]]:
    """(method, path) of every operation of the OpenAPI document that takes a body."""
    found = []
    for template, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            if "requestBody" in operation:
                path = re.sub(r"\{(\w+)\}", lambda m: PATH_VALUES[m[1]], template)
                found.append((method.upper(), path))
    return found


def assert_unauthenticated(answer: Any) -> None:
    assert answer.status_code == 401, answer.text
    assert answer.json()["error"]["code"] == "unauthenticated"
    assert answer.headers["WWW-Authenticate"] == 'Bearer realm="session-ledger"'


def test_every_route_with_a_body_authenticates_before_decoding_it(api: Api) -> None:
    """No key, a malformed header, an unknown key: 401, not the 400 of the body."""
    operations = body_operations(api.app)
    for expected in [("POST", "/v1/sessions/chat/messages"), ("PUT", "/v1/sessions/chat/messages"),
                     ("POST", "/v1/keys"), ("POST", "/v1/sessions/chat/erase"),
                     ("POST", "/v1/sessions/chat/streams/s1/chunks")]:  # fmt: skip
        assert expected in operations
    for method, path in operations:
        for headers in ({}, {"Authorization": "Basic abc"}, {"Authorization": f"Bearer {BAD_KEY}"}):
            answer = api.client.request(method, path, content=MALFORMED, headers=headers)
            assert_unauthenticated(answer)
    # An authenticated caller gets the 400 of its body, as before.
    answer = api.client.post("/v1/sessions/chat/messages", content=MALFORMED, headers=api.auth)
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"]["code"] == "malformed_json"


@pytest.mark.parametrize("key", [None, BAD_KEY])
def test_an_unauthenticated_body_is_never_read(api: Api, key: str | None) -> None:
    """The app never asks the server for a byte of the body: no `http.request` taken."""
    head = b'{"messages": ['
    chunks = [head, *[b"{}, " * 10_000] * 20, b"{}]}"]
    status, reads = asyncio.run(_call(api.app, "POST", "/v1/sessions/chat/messages", chunks, key))
    assert (status, reads) == (401, 0)
    # The same body from the admin is read to its end (and refused for its messages).
    status, reads = asyncio.run(
        _call(api.app, "POST", "/v1/sessions/chat/messages", chunks, api.admin)
    )
    assert (status, reads) == (413, len(chunks))


def test_an_unauthenticated_large_write_is_never_decoded(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    decodes = Counted()
    request = large_bodies.LargeBodyRequest
    monkeypatch.setattr(request, "json", _async_counted(decodes, request.json))
    body = b'{"messages": [' + b"{}, " * 200_000 + b"{}]}"
    for headers in ({}, {"Authorization": f"Bearer {BAD_KEY}"}):
        assert_unauthenticated(api.client.post("/v1/sessions/chat/messages", content=body,
                                               headers=headers))  # fmt: skip
    assert decodes.calls == 0
    message = {"messages": [{"role": "user", "content": "hi " * 1000}]}
    assert api.client.post("/v1/sessions/chat/messages", json=message, headers=api.auth).is_success
    assert decodes.calls == 1


def test_failed_authentications_over_their_limit_answer_429_unread(api: Api) -> None:
    settings = Settings(
        database_url="memory://", tokenizer="whitespace", auth_failures_per_second=0.0001,
        auth_failures_burst=2,
    )  # fmt: skip
    ledger = open_ledger(settings)
    try:
        app = create_app(settings, ledger=ledger, key_store=MemoryKeyStore())
        with TestClient(app, headers={"Content-Type": "application/json"}) as client:
            headers = {"Authorization": f"Bearer {BAD_KEY}"}
            answers = [client.post("/v1/sessions/chat/messages", content=MALFORMED,
                                   headers=headers) for _ in range(4)]  # fmt: skip
            assert [a.status_code for a in answers] == [401, 401, 429, 429]
            refused = answers[-1]
            assert int(refused.headers["Retry-After"]) > 3600
            error = refused.json()["error"]
            assert (error["code"], error["details"]["limit"]) == (
                "rate_limited",
                "auth_failures:address",
            )
            metrics = client.get("/metrics").text
            assert (
                'session_ledger_rate_limit_refusals_total{code="rate_limited",'
                'limit="auth_failures:address"} 2.0'
            ) in metrics
            assert (
                'session_ledger_http_requests_total{method="POST",'
                'route="/v1/sessions/{key}/messages",status="429"} 2.0'
            ) in metrics
    finally:
        ledger.close()


@pytest.mark.parametrize(
    ("method", "path", "body"),
    [
        ("POST", "/v1/sessions/chat/messages", {"messages": [{"role": "user", "content": "hi"}]}),
        ("PUT", "/v1/sessions/chat/messages", {"messages": [{"role": "user", "content": "hi"}]}),
        ("POST", "/v1/keys", {"role": "agent", "name": "a"}),
        ("POST", "/v1/sessions/chat/streams", {"role": "assistant"}),
    ],
)
def test_an_authenticated_body_looks_its_key_up_once(
    api: Api, monkeypatch: pytest.MonkeyPatch, method: str, path: str, body: dict[str, Any]
) -> None:
    assert api.client.get("/v1/sessions", headers=api.auth).is_success  # the key held
    checks = Counted()
    monkeypatch.setattr(api.keys, "cached", checks.wrap(api.keys.cached))
    monkeypatch.setattr(api.keys, "authenticate", checks.wrap(api.keys.authenticate))
    answer = api.client.request(method, path, json=body, headers=api.auth)
    assert answer.is_success, answer.text
    assert checks.calls == 1
    template = "/v1/keys" if path == "/v1/keys" else path.replace("/chat/", "/{key}/")
    metrics = api.client.get("/metrics").text
    status = answer.status_code
    assert f'method="{method}",route="{template}",status="{status}"}} 1.0' in metrics


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("item", [b"{}", b"[]", b'{"role": "user", "content": "x"}'])
@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_too_many_messages_answer_one_413_before_validation(
    api: Api, monkeypatch: pytest.MonkeyPatch, size: str, item: bytes, method: str
) -> None:
    """One error, the domain's for too many messages; a large body is decoded no further
    than the first message over the limit."""
    decoder = _CountedDecoder()
    monkeypatch.setattr(large_bodies, "_DECODER", decoder)
    count = MAX_MESSAGES + 1 if size == "small" else 100_000
    body = b'{"messages": [' + b", ".join([item] * count) + b"]}"
    assert (len(body) <= LOOP_MAX) == (size == "small")
    answer = api.client.request(method, "/v1/sessions/chat/messages", content=body,
                                headers=api.auth)  # fmt: skip
    assert answer.status_code == 413, answer.text[:500]
    error = answer.json()["error"]
    assert error["code"] == "payload_too_large"
    assert error["details"] == {}
    assert error["message"].endswith(f"messages in one write; the limit is {MAX_MESSAGES}")
    assert decoder.calls <= MAX_MESSAGES + 1  # (a large body's items, and its key)
    assert api.client.get("/v1/sessions/chat", headers=api.auth).status_code == 404


@pytest.mark.parametrize("filler", [0, 2 * LOOP_MAX])
def test_a_write_of_as_many_messages_as_the_limit_is_stored(api: Api, filler: int) -> None:
    messages = [{"role": "user", "content": "x"} for _ in range(MAX_MESSAGES)]
    messages[0]["content"] = "y" * filler
    answer = api.client.post("/v1/sessions/chat/messages", json={"messages": messages},
                             headers=api.auth)  # fmt: skip
    assert answer.status_code == 200, answer.text
    assert answer.json()["message_count"] == MAX_MESSAGES


@pytest.mark.parametrize("size", ["small", "large"])
@pytest.mark.parametrize("route", ["chunks", "complete", "abort"])
def test_too_many_deltas_in_a_stream_batch_answer_one_413_before_validation(
    api: Api, monkeypatch: pytest.MonkeyPatch, size: str, route: str
) -> None:
    """A stream batch's deltas are bounded as a write's messages are (each batch at most
    `max_messages_per_write`), and counted as they are decoded."""
    opened = api.client.post("/v1/sessions/chat/streams", json={"stream_id": "s"},
                             headers=api.auth)  # fmt: skip
    assert opened.status_code == 201, opened.text
    decoder = _CountedDecoder()
    monkeypatch.setattr(large_bodies, "_DECODER", decoder)
    count = MAX_MESSAGES + 1 if size == "small" else 100_000
    cause = b'"cause": "client_gone", ' if route == "abort" else b""
    body = b"{" + cause + b'"deltas": [' + b", ".join([b'""'] * count) + b"]}"
    assert (len(body) <= LOOP_MAX) == (size == "small")
    answer = api.client.post(f"/v1/sessions/chat/streams/s/{route}", content=body,
                             headers=api.auth)  # fmt: skip
    assert answer.status_code == 413, answer.text[:500]
    error = answer.json()["error"]
    assert (error["code"], error["details"]) == ("payload_too_large", {})
    assert error["message"].endswith(f"deltas in one write; the limit is {MAX_MESSAGES}")
    assert decoder.calls <= MAX_MESSAGES + 3  # (a large body's items, its keys, a cause)
    state = api.client.get("/v1/sessions/chat/streams/s", headers=api.auth).json()
    assert (state["state"], state["text"]) == ("open", "")
    # As many as the limit are taken; in process, one more is refused as over HTTP.
    deltas = [""] * (MAX_MESSAGES - 1) + ["done"]
    chunks = api.client.post("/v1/sessions/chat/streams/s/chunks", json={"deltas": deltas},
                             headers=api.auth)  # fmt: skip
    assert chunks.status_code == 200, chunks.text
    with pytest.raises(PayloadTooLarge, match="deltas in one batch"):
        api.app.state.ledger.append_stream("chat", "s", [""] * (MAX_MESSAGES + 1))


def test_decode_in_parts_stops_at_the_first_message_over_the_limit() -> None:
    body = json.dumps({"other": [1, 2, 3, 4], "messages": [{}, {}, {}, {}]}).encode()
    assert large_bodies.decode_in_parts(body) == json.loads(body)
    assert large_bodies.decode_in_parts(body, 4) == json.loads(body)
    with pytest.raises(large_bodies.TooManyMessages) as raised:
        large_bodies.decode_in_parts(body, 3)
    assert (raised.value.limit, raised.value.count) == (3, None)
    # What `_object_in_parts` does not take (here a BOM) falls back to json.loads, and
    # is counted after it.
    marked = b"\xef\xbb\xbf" + body
    with pytest.raises(large_bodies.TooManyMessages) as raised:
        large_bodies.decode_in_parts(marked, 3)
    assert (raised.value.limit, raised.value.count) == (3, 4)


class _CountedDecoder:
    def __init__(self) -> None:
        self.calls = 0
        self.decoder = json.JSONDecoder()

    def raw_decode(self, text: str, at: int = 0) -> tuple[Any, int]:
        self.calls += 1
        return self.decoder.raw_decode(text, at)


def _async_counted(counter: Counted, function: Any) -> Any:
    async def counted(*args: Any, **kwargs: Any) -> Any:
        counter.calls += 1
        return await function(*args, **kwargs)

    return counted


async def _call(
    app: FastAPI, method: str, path: str, chunks: list[bytes], key: str | None
) -> tuple[int, int]:
    """(status, reads): the app called with a body in `chunks`, counting the reads of it."""
    reads, status = 0, 0

    async def receive() -> dict[str, Any]:
        nonlocal reads
        if reads < len(chunks):
            reads += 1
            return {"type": "http.request", "body": chunks[reads - 1],
                    "more_body": reads < len(chunks)}  # fmt: skip
        await asyncio.sleep(3600)  # the client waits for its answer
        return {"type": "http.disconnect"}

    async def send(message: dict[str, Any]) -> None:
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    headers = [(b"content-type", b"application/json"),
               (b"content-length", str(sum(map(len, chunks))).encode())]  # fmt: skip
    if key is not None:
        headers.append((b"authorization", f"Bearer {key}".encode()))
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "headers": headers, "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80), "state": {},
    }  # fmt: skip
    await app(scope, receive, send)
    return status, reads


@pytest.mark.parametrize("size", ["small", "large"])
def test_a_body_of_too_many_members_is_refused_before_validation(
    api: Api, monkeypatch: pytest.MonkeyPatch, size: str
) -> None:
    """A body whose object has more members than any route takes: one 422, decoded no
    further than the first member over (FastAPI validated it on the event loop, one
    error a member: a million held every request for seconds), nothing stored."""
    decoder = _CountedDecoder()
    monkeypatch.setattr(large_bodies, "_DECODER", decoder)
    count = large_bodies.MAX_MEMBERS + 1 if size == "small" else 400_000
    extra = b", ".join(b'"z%d": 0' % i for i in range(count))
    body = b'{"messages": [{"role": "user", "content": "x"}], ' + extra + b"}"
    assert (len(body) <= LOOP_MAX) == (size == "small")
    answer = api.client.post("/v1/sessions/chat/messages", content=body, headers=api.auth)
    assert answer.status_code == 422, answer.text[:500]
    error = answer.json()["error"]
    assert error["code"] == "invalid_input"
    assert f"more than {large_bodies.MAX_MEMBERS} members" in error["message"]
    assert decoder.calls <= 2 * large_bodies.MAX_MEMBERS + 2  # (its keys and values)
    assert api.client.get("/v1/sessions/chat", headers=api.auth).status_code == 404
    # As many members as a route may name are validated as before: each unknown one named
    fields = b", ".join(b'"z%d": 0' % i for i in range(large_bodies.MAX_MEMBERS - 1))
    body = b'{"messages": [{"role": "user", "content": "x"}], ' + fields + b"}"
    answer = api.client.post("/v1/sessions/chat/messages", content=body, headers=api.auth)
    assert answer.status_code == 422 and "z0" in answer.text, answer.text[:500]
