"""Live tails whose batches the server bounds and encodes off the event loop: a session's
tail and the tenant-wide tail read events larger than `max_answer_bytes` a batch at a
time, each batch ending before the answer bytes (its first whatever its size), and still
send every event exactly once, in order, with the same bytes as the audit trail's JSON;
the events are encoded to JSON in the worker thread that reads them, not on the loop."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any
from urllib.parse import quote

import pytest
from fastapi.testclient import TestClient

from session_ledger.api.live_hub import LiveHub
from session_ledger.api.routes import live
from session_ledger.api.schemas import AuditEvent, FeedEvent
from session_ledger.domain.ledger import Ledger
from tests.memory_api import memory_api

TENANT, OTHER = "acme", "other"
ANSWER = 4096  # max_answer_bytes of these tests
BIG = "x" * 6000  # a message whose event is larger than ANSWER
SMALL = "hi"


class Server:
    """An app on a memory store whose tails live a second, its ledger, and admin keys of
    TENANT and of OTHER."""

    def __init__(self, client: TestClient, ledger: Ledger, other: str) -> None:
        self.http, self.ledger, self.other = client, ledger, other

    def put(self, key: str, text: str, *, tenant: str = TENANT) -> None:
        headers = {"Authorization": f"Bearer {self.other}"} if tenant == OTHER else {}
        body = {"messages": [{"role": "user", "content": text}]}
        answer = self.http.post(f"/v1/sessions/{quote(key, safe='')}/messages", json=body,
                                headers=headers)  # fmt: skip
        assert answer.status_code == 200, answer.text

    def tail(self, path: str, last_event_id: str | None = None) -> list[tuple[str, str, bytes]]:
        """The tail's events (id, event, data), read until it ends (its lifetime over)."""
        headers = {} if last_event_id is None else {"Last-Event-ID": last_event_id}
        with self.http.stream("GET", path, headers=headers) as answer:
            assert answer.status_code == 200
            body = b"".join(answer.iter_bytes())
        assert body.endswith(b": tail ended: its time is over; reconnect with Last-Event-ID\n\n")
        return messages(body)


def messages(body: bytes) -> list[tuple[str, str, bytes]]:
    """The SSE messages of `body` that carry an event; a heartbeat's `id:` alone as
    ("id", cursor, b"")."""
    found: list[tuple[str, str, bytes]] = []
    for block in body.split(b"\n\n"):
        fields = dict(
            line.split(b": ", 1) for line in block.split(b"\n") if line and line[:1] != b":"
        )
        if b"data" in fields:
            found.append((fields[b"id"].decode(), fields[b"event"].decode(), fields[b"data"]))
        elif b"id" in fields:
            found.append(("id", fields[b"id"].decode(), b""))
    return found


@pytest.fixture
def server() -> Iterator[Server]:
    with memory_api(
        tenant=TENANT, default_tenant=TENANT, max_answer_bytes=ANSWER, tail_max_seconds=1.0,
        tail_heartbeat_seconds=30,
    ) as api:  # fmt: skip
        _, other = api.keys.create(OTHER, "admin")
        yield Server(api.client, api.ledger, other)


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[int]]:
    """The threads the events' JSON is made in, and the event loop's (where a tail
    subscribes to the hub)."""
    seen: dict[str, set[int]] = {"json": set(), "loop": set()}
    dump = AuditEvent.model_dump_json

    def model_dump_json(self: AuditEvent, **kwargs: Any) -> str:
        seen["json"].add(threading.get_ident())
        return dump(self, **kwargs)

    def on_loop(method: Callable[..., None]) -> Callable[..., None]:
        def subscribed(self: LiveHub, *args: Any) -> None:
            seen["loop"].add(threading.get_ident())
            method(self, *args)

        return subscribed

    monkeypatch.setattr(AuditEvent, "model_dump_json", model_dump_json)
    monkeypatch.setattr(LiveHub, "subscribe", on_loop(LiveHub.subscribe))
    monkeypatch.setattr(LiveHub, "subscribe_tenant", on_loop(LiveHub.subscribe_tenant))
    return seen


def is_big(entry: Any) -> bool:
    return BIG in AuditEvent(**vars(entry)).model_dump_json()


def test_a_session_tail_reads_large_events_in_bounded_batches_each_once(
    server: Server, threads: dict[str, set[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    for text in (BIG, SMALL, BIG, BIG, SMALL, SMALL, BIG):
        server.put("chat", text)  # versions 1 (SessionStarted) to 8
    trail = server.ledger.audit("chat", tenant=TENANT, limit=100)
    expected = [(str(e.version), e.event_type, AuditEvent(**vars(e)).model_dump_json().encode())
                for e in trail]  # fmt: skip
    assert len(expected) == 8 and sum(map(is_big, trail)) == 4

    reads: list[list[Any]] = []
    audit = server.ledger.audit

    def counted(*args: Any, **kwargs: Any) -> Any:
        entries = audit(*args, **kwargs)
        reads.append(entries)
        return entries

    monkeypatch.setattr(server.ledger, "audit", counted)
    threads["json"].clear()
    got = server.tail("/v1/sessions/chat/events/live")

    assert got == expected  # every event once, in order, the same bytes
    assert [e.version for read in reads for e in read] == list(range(1, 9))  # none read twice
    assert all(sum(map(is_big, read)) <= 1 for read in reads), [len(r) for r in reads]
    assert len(reads) >= 4
    # resumed in the middle: the same bytes from there on
    assert server.tail("/v1/sessions/chat/events/live", "3") == expected[3:]
    assert threads["json"] and threads["loop"]
    assert not threads["json"] & threads["loop"], "events encoded on the event loop"


def test_a_tenant_tail_reads_large_events_in_bounded_batches_each_once(
    server: Server, threads: dict[str, set[int]], monkeypatch: pytest.MonkeyPatch
) -> None:
    server.put("start", SMALL)
    start = server.tail("/v1/events/live")  # nothing since it opened: its cursor alone
    assert [kind for kind, _, _ in start] == ["id"]
    cursor = start[-1][1]
    writes = [("a", BIG, TENANT), ("a", SMALL, TENANT), ("b", BIG, OTHER), ("b", BIG, TENANT),
              ("a", BIG, TENANT), ("b", SMALL, TENANT), ("a", BIG, TENANT),
              ("c", SMALL, TENANT)]  # fmt: skip
    for key, text, tenant in writes:
        server.put(key, text, tenant=tenant)

    reads: list[list[Any]] = []
    batches: list[list[bytes]] = []
    tenant_events = server.ledger.tenant_events
    tenant_batch = getattr(live, "_tenant_batch", None)

    def counted(**kwargs: Any) -> Any:
        page = tenant_events(**kwargs)
        reads.append(page.entries)
        return page

    def batched(*args: Any) -> Any:
        assert tenant_batch is not None
        batch = tenant_batch(*args)
        batches.append(list(batch.frames))
        return batch

    monkeypatch.setattr(server.ledger, "tenant_events", counted)
    monkeypatch.setattr(live, "_tenant_batch", batched, raising=False)
    threads["json"].clear()
    got = [m for m in server.tail("/v1/events/live", cursor) if m[0] != "id"]

    mine = [(k, t) for k, t, tenant in writes if tenant == TENANT]
    assert len(got) == len(mine) + 3  # and the SessionStarted of a, b and c
    sent = [FeedEvent.model_validate_json(data) for _, _, data in got]
    assert [(e.key, e.version) for e in sent] == [
        ("a", 1), ("a", 2), ("a", 3), ("b", 1), ("b", 2), ("a", 4), ("b", 3), ("a", 5),
        ("c", 1), ("c", 2),
    ]  # fmt: skip  # every event once, in order
    for (_, event, data), e in zip(got, sent, strict=True):  # the bytes as made before
        (entry,) = server.ledger.audit(e.key, tenant=TENANT, after_version=e.version - 1, limit=1)
        assert (event, data) == (
            entry.event_type, FeedEvent(key=e.key, **vars(entry)).model_dump_json().encode()
        )  # fmt: skip
    assert len({cursor for cursor, _, _ in got}) == len(got)

    assert threads["json"] and threads["loop"]
    assert not threads["json"] & threads["loop"], "events encoded on the event loop"
    # each batch ends before ANSWER bytes, its first whatever its size
    assert sum(map(len, batches)) == len(got)
    for frames in batches:
        assert len(frames) == 1 or sum(map(len, frames)) <= ANSWER, list(map(len, frames))
        assert sum(BIG.encode() in f for f in frames) <= 1
    # a read whose events passed ANSWER was cut: the next looks at one event
    assert len(reads) == len(batches)
    cut = [i for i, read in enumerate(reads) if len(batches[i]) < len(read)]
    assert cut, [len(r) for r in reads]
    assert all(len(reads[i + 1]) <= 1 for i in cut), [len(r) for r in reads]
