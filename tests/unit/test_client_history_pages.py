"""The clients read a history page after page through `next_cursor`: the pages after the
first carry the cursor (which names their version and place), the status, and what is
left of the caller's `limit`, never the first page's offset or point in time."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from session_ledger.api.client import LedgerClient
from session_ledger.api.client_async import AsyncLedgerClient

MESSAGES = [{"role": "user", "blocks": [{"block_type": "text", "text": f"m{i}"}],
             "additional_kwargs": {}} for i in range(7)]  # fmt: skip


class Server:
    """Answers the history three messages a page, the cursor the place of the next."""

    def __init__(self) -> None:
        self.asked: list[dict[str, str]] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        self.asked.append(params)
        start = int(params.get("cursor", "0").rpartition("-")[2]) + int(params.get("offset", 0))
        if "last" in params:
            start = max(0, len(MESSAGES) - int(params["last"]))
        end = min(start + min(3, int(params.get("limit", 3))), len(MESSAGES))
        following = f"2-{end}" if end < len(MESSAGES) else None
        return httpx.Response(200, json={"messages": MESSAGES[start:end], "next_cursor": following})


def texts(found: list[Any]) -> list[str]:
    return [m.content for m in found]


def test_the_clients_follow_the_cursor_to_the_last_page() -> None:
    server = Server()
    with LedgerClient("http://ledger", "k", transport=httpx.MockTransport(server)) as client:
        assert texts(client.get_all("s")) == [f"m{i}" for i in range(7)]
        assert [p.get("cursor") for p in server.asked] == [None, "2-3", "2-6"]
        server.asked.clear()
        assert texts(client.get_all("s", offset=1, limit=5, as_of_version=2)) == [
            "m1", "m2", "m3", "m4", "m5",
        ]  # fmt: skip
        assert server.asked[1:] == [{"status": "active", "cursor": "2-4", "limit": "2"}]

    async def read() -> list[str]:
        transport = httpx.MockTransport(server)
        async with AsyncLedgerClient("http://ledger", "k", transport=transport) as client:
            return texts(await client.get_all("s"))

    assert asyncio.run(read()) == [f"m{i}" for i in range(7)]


def test_the_newest_are_asked_once_then_followed_by_cursor() -> None:
    server = Server()
    with LedgerClient("http://ledger", "k", transport=httpx.MockTransport(server)) as client:
        assert texts(client.get_all("s", last=5)) == ["m2", "m3", "m4", "m5", "m6"]
    assert [p.get("last") for p in server.asked] == ["5", None]
    assert server.asked[1] == {"status": "active", "cursor": "2-5"}

    async def read() -> list[str]:
        transport = httpx.MockTransport(server)
        async with AsyncLedgerClient("http://ledger", "k", transport=transport) as client:
            return texts(await client.get_all("s", last=2))

    assert asyncio.run(read()) == ["m5", "m6"]
