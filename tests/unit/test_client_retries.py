"""The HTTP client sends every write with an Idempotency-Key and sends a call again after a
failed connection or a 503, with the same key, so a write is applied once."""

from __future__ import annotations

import httpx
import pytest

from session_ledger.api.client import LedgerClient
from session_ledger.api.client_requests import RETRIES, Requests, retry_wait

OK = {"version": 2, "message_count": 1, "replayed": False, "removed": []}


def test_every_write_carries_a_key_of_its_own() -> None:
    first = Requests.put_messages("s", [{"role": "user", "content": "hi"}])
    second = Requests.put_messages("s", [{"role": "user", "content": "hi"}])
    keys = {first.headers["Idempotency-Key"], second.headers["Idempotency-Key"]}
    assert len(keys) == 2
    given = Requests.reset("s", idempotency_key="mine")
    assert given.headers["Idempotency-Key"] == "mine"


def test_retry_wait_covers_dropped_connections_and_503_only() -> None:
    request = httpx.Request("GET", "http://x")
    assert retry_wait(0, None) == pytest.approx(0.2)
    assert retry_wait(0, httpx.Response(503, headers={"Retry-After": "0"}, request=request)) == 0
    assert retry_wait(0, httpx.Response(503, headers={"Retry-After": "600"}, request=request)) == 5
    for status in (200, 404, 409, 422, 500):
        assert retry_wait(0, httpx.Response(status, request=request)) is None
    assert retry_wait(RETRIES, None) is None


def test_a_write_is_sent_again_with_the_same_key() -> None:
    seen: list[str] = []

    def answer(request: httpx.Request) -> httpx.Response:
        seen.append(request.headers["Idempotency-Key"])
        if len(seen) == 1:
            raise httpx.ConnectError("dropped", request=request)
        if len(seen) == 2:
            return httpx.Response(503, headers={"Retry-After": "0"}, json={"error": {
                "code": "store_unavailable", "message": "away", "details": {}}})  # fmt: skip
        return httpx.Response(200, json=OK)

    with LedgerClient("http://ledger", "k", transport=httpx.MockTransport(answer)) as client:
        assert client.put("s", {"role": "user", "content": "hi"}).version == 2
    assert len(seen) == 3 and len(set(seen)) == 1


def test_it_gives_up_after_the_retries() -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("down", request=request)

    client = LedgerClient("http://ledger", "k", transport=httpx.MockTransport(answer))
    with client, pytest.raises(httpx.ConnectError):
        client.head("s")
