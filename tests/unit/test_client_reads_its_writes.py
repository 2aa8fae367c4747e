"""The clients send the version their last write of a session answered as `min_version`
on their reads of it, so a client reads its own writes through any server process, also
where read replicas serve reads (docs/operations.md#read-replicas)."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from session_ledger.api.client import LedgerClient
from session_ledger.api.client_async import AsyncLedgerClient
from session_ledger.api.client_requests import AsOf, Requests, WrittenVersions
from session_ledger.api.schemas import WriteAnswer

WRITTEN = WriteAnswer(version=7, message_count=1, replayed=False, removed=[])
HEAD = {
    "key": "s", "version": 7, "message_count": 1, "archived_count": 0, "token_total": 1,
    "created_at": "2026-01-01T00:00:00Z", "updated_at": "2026-01-01T00:00:00Z",
    "last_event": "MessagesAppended",
}  # fmt: skip


class Server:
    """Answers writes with version 7 and reads with what they asked for, and notes the
    `min_version` each read sent (None: none)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, str | None]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.method != "GET":
            return httpx.Response(200, json=WRITTEN.model_dump())
        self.sent.append((request.url.path, request.url.params.get("min_version")))
        if request.url.path.endswith(("/context", "/messages")):
            return httpx.Response(200, json={"messages": []})
        return httpx.Response(200, json=HEAD)


def reads(client: Any) -> None:
    client.get("s")
    client.get_all("s", min_version=9)
    client.head("s")
    client.get("other")


EXPECTED = [
    ("/v1/sessions/s/context", "7"), ("/v1/sessions/s/messages", "9"),
    ("/v1/sessions/s", "7"), ("/v1/sessions/other/context", None),
]  # fmt: skip


def test_the_blocking_client_reads_its_own_writes() -> None:
    server = Server()
    with LedgerClient("http://ledger", "k", transport=httpx.MockTransport(server)) as client:
        client.get("s")
        assert server.sent == [("/v1/sessions/s/context", None)]
        client.put("s", {"role": "user", "content": "hi"})
        server.sent.clear()
        reads(client)
    assert server.sent == EXPECTED


def test_the_asyncio_client_reads_its_own_writes() -> None:
    server = Server()

    async def run() -> None:
        transport = httpx.MockTransport(server)
        async with AsyncLedgerClient("http://ledger", "k", transport=transport) as client:
            await client.reset("s")
            await client.get("s")
            await client.get_all("s", min_version=9)
            await client.head("s")
            await client.get("other")

    asyncio.run(run())
    assert server.sent == EXPECTED


def test_only_the_newest_sessions_are_kept() -> None:
    versions = WrittenVersions(kept=2)
    for key in ("a", "b", "c"):
        versions.note(Requests.reset(key), WRITTEN)
    read = Requests.get("a", None, 0, AsOf())
    assert versions.applied(read) is read
    assert versions.applied(Requests.get("c", None, 0, AsOf())).params["min_version"] == 7
