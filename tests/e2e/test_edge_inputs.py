"""Inputs at the edge of what the stores hold: 4xx or the right answer, never a 5xx, on
both stores. Each test closes a class, not an instance: every time parameter the API
document lists, every text parameter, every key in the code-point range."""

from __future__ import annotations

import contextlib
import socket
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from session_ledger.api.client import session_path

from .conftest import Deployment

USER = {"role": "user", "content": "hi"}
# Moments an offset moves out of years 1..9999 in UTC, each as sent in a query string.
OUT_OF_RANGE = ["0001-01-01T00:00:00%2B01:00", "9999-12-31T23:30:00-01:00"]
TOP = "\U0010ffff"


@pytest.fixture
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with deployment.raw("a_admin") as client:
        yield client


def _operations(http: httpx.Client) -> Iterator[tuple[str, str, dict[str, Any]]]:
    for path, methods in http.get("/openapi.json").json()["paths"].items():
        for method, operation in methods.items():
            yield method.upper(), path, operation


def _filled(path: str, session: str, **values: str) -> str:
    """The path with the session's key (percent-encoded) and the given parameters."""
    for name, value in values.items():
        path = path.replace("{" + name + "}", value)
    path = path.replace("{key}", quote(session, safe=""))
    return path.replace("{index}", "0").replace("{key_id}", "x")


def test_every_time_parameter_refuses_a_moment_out_of_range(
    http: httpx.Client, session_key: str
) -> None:
    http.post(session_path(session_key, "/messages"), json={"messages": [USER]})
    checked = []
    for method, path, operation in _operations(http):
        for parameter in operation.get("parameters", []):
            if parameter["schema"].get("format") != "date-time":
                continue
            for moment in OUT_OF_RANGE:
                target = f"{_filled(path, session_key)}?{parameter['name']}={moment}"
                answer = http.request(method, target)
                assert answer.status_code == 422, (target, answer.text)
                assert "years 1 to 9999" in answer.json()["error"]["message"]
            checked.append((method, path, parameter["name"]))
    assert ("GET", "/v1/sessions/{key}/messages", "as_of") in checked
    assert ("GET", "/v1/sessions/{key}/context", "as_of") in checked


def test_times_at_the_ends_of_the_range_are_answered(http: httpx.Client, session_key: str) -> None:
    path = session_path(session_key, "/messages")
    http.post(path, json={"messages": [USER]})
    early = http.get(path, params={"as_of": "0001-01-01T00:00:00-01:00"})
    assert early.status_code == 404 and early.json()["error"]["code"] == "state_not_found"
    late = http.get(path, params={"as_of": "9999-12-31T23:59:59.999999+00:00"})
    assert late.status_code == 200 and len(late.json()["messages"]) == 1


def test_every_text_parameter_with_nul_is_a_4xx(http: httpx.Client, session_key: str) -> None:
    http.post(session_path(session_key, "/messages"), json={"messages": [USER]})
    sent = 0
    for method, path, operation in _operations(http):
        for parameter in operation.get("parameters", []):
            schema = parameter["schema"]
            if parameter["in"] not in ("path", "query") or schema.get("type") != "string":
                continue
            if parameter["in"] == "path":
                target = _filled(path, session_key, **{parameter["name"]: "a%00b"})
            else:
                target = f"{_filled(path, session_key)}?{parameter['name']}=a%00b"
            body = {"messages": [USER], "count": 1} if method in ("POST", "PUT") else None
            answer = http.request(method, target, json=body)
            assert 400 <= answer.status_code < 500, (method, target, answer.text)
            sent += 1
    assert sent >= 10


def test_revoking_a_key_id_with_nul_is_404(http: httpx.Client) -> None:
    for key_id in ("%00", "a%00b"):
        answer = http.delete(f"/v1/keys/{key_id}")
        assert answer.status_code == 404, answer.text
        assert answer.json()["error"]["code"] == "key_not_found"


def _all_keys(http: httpx.Client, prefix: str = "") -> list[str]:
    keys: list[str] = []
    cursor: str | None = None
    while True:
        params = {"prefix": prefix, "limit": "1000", **({"cursor": cursor} if cursor else {})}
        page = http.get("/v1/sessions", params=params).json()
        keys += page["keys"]
        cursor = page["next_cursor"]
        if cursor is None:
            return keys


def test_keys_with_the_highest_code_point_are_listed(deployment: Deployment) -> None:
    run = uuid.uuid4().hex[:8]
    stored = [f"{TOP}{run}", f"{TOP}{TOP}{run}", f"{run}{TOP}", f"{run}{TOP}x", f"{run}a{TOP}"]
    with deployment.raw("b_agent") as http:
        for key in stored:
            assert http.post(session_path(key, "/messages"), json={"messages": [USER]}).is_success
        everything = _all_keys(http)
        assert set(stored) <= set(everything)
        assert everything == sorted(everything)
        assert _all_keys(http, run) == sorted(k for k in stored if k.startswith(run))
        assert _all_keys(http, f"{run}{TOP}") == [f"{run}{TOP}", f"{run}{TOP}x"]
        assert set(_all_keys(http, TOP)) >= {f"{TOP}{run}", f"{TOP}{TOP}{run}"}
        doubled = _all_keys(http, TOP + TOP)
        assert f"{TOP}{TOP}{run}" in doubled and all(k.startswith(TOP + TOP) for k in doubled)


def _send_head(base_url: str, header_bytes: int) -> bytes:
    """The answer to a GET /healthz whose one header is `header_bytes` long, sent in
    64 KiB writes as a client would; b"" if the server closed without one."""
    url = httpx.URL(base_url)
    with socket.create_connection((url.host, url.port), timeout=30) as conn:
        conn.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Filler: ")
        chunk, sent = b"a" * 65536, 0
        try:
            while sent < header_bytes:
                conn.sendall(chunk[: header_bytes - sent])
                sent += len(chunk)
            conn.sendall(b"\r\nConnection: close\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # (refused while sending: its answer is read below)
        answer = b""
        with contextlib.suppress(ConnectionResetError):
            while piece := conn.recv(65536):
                answer += piece
        return answer


def test_a_request_head_over_a_mebibyte_is_refused_and_holds_no_one(
    deployment: Deployment, http: httpx.Client
) -> None:
    """A header of any length was gathered on the event loop (100 MiB held every other
    request for a second): past 1 MiB the connection is answered 431 and closed."""
    assert _send_head(deployment.base_url, 512 * 1024).startswith(b"HTTP/1.1 200 ")
    refused = _send_head(deployment.base_url, 8 * 1024 * 1024)
    assert refused.startswith(b"HTTP/1.1 431 ") or refused == b"", refused[:200]
    assert http.get("/healthz").status_code == 200
