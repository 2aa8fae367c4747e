"""Bad input over HTTP: refused whole with the right 4xx and the one error shape, never a
5xx, and nothing stored. The server's limits are set low by the fixture (conftest.LIMITS)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from session_ledger.api.client import session_path

from .conftest import LIMITS, Deployment

USER = {"role": "user", "content": "hi"}
MAX_BODY = int(LIMITS["LEDGER_MAX_BODY_BYTES"])
MAX_MESSAGE = int(LIMITS["LEDGER_MAX_MESSAGE_BYTES"])
MAX_MESSAGES = int(LIMITS["LEDGER_MAX_MESSAGES_PER_WRITE"])


def error_of(answer: httpx.Response, status: int) -> dict[str, Any]:
    assert answer.status_code == status, answer.text
    body = answer.json()
    assert set(body) == {"error"} and set(body["error"]) == {"code", "message", "details"}
    assert body["error"]["message"]
    return body["error"]  # type: ignore[no-any-return]


@pytest.fixture
def http(deployment: Deployment) -> Iterator[httpx.Client]:
    with deployment.raw("a_agent") as client:
        yield client


def assert_nothing_stored(http: httpx.Client, key: str) -> None:
    assert http.get(session_path(key)).status_code == 404


@pytest.mark.parametrize("method", ["POST", "PUT"])
def test_empty_body_is_422(http: httpx.Client, session_key: str, method: str) -> None:
    path = session_path(session_key, "/messages")
    for content in (b"", b"{}", b"null"):
        answer = http.request(method, path, content=content,
                              headers={"Content-Type": "application/json"})  # fmt: skip
        assert error_of(answer, 422)["code"] == "invalid_request"
    assert error_of(http.post(path, json={"messages": []}), 422)["code"] == "invalid_request"
    assert_nothing_stored(http, session_key)


def test_body_over_the_limit_is_413_by_length_and_when_streamed(
    http: httpx.Client, session_key: str
) -> None:
    path = session_path(session_key, "/messages")
    big = json.dumps({"messages": [{"role": "user", "content": "x" * MAX_BODY}]}).encode()
    answer = http.post(path, content=big, headers={"Content-Type": "application/json"})
    assert error_of(answer, 413)["code"] == "body_too_large"

    def chunks() -> Iterator[bytes]:  # no Content-Length: chunked transfer encoding
        for start in range(0, len(big), 8192):
            yield big[start : start + 8192]

    answer = http.post(path, content=chunks(), headers={"Content-Type": "application/json"})
    assert error_of(answer, 413)["code"] == "body_too_large"
    assert_nothing_stored(http, session_key)


def test_message_and_write_over_the_limits_are_413(http: httpx.Client, session_key: str) -> None:
    path = session_path(session_key, "/messages")
    too_long = {"role": "user", "content": "x" * MAX_MESSAGE}
    assert error_of(http.post(path, json={"messages": [too_long]}), 413)["code"] == (
        "payload_too_large"
    )
    too_many = {"messages": [USER] * (MAX_MESSAGES + 1)}
    assert error_of(http.put(path, json=too_many), 413)["code"] == "payload_too_large"
    near_limit = {"role": "user", "content": "x" * (MAX_MESSAGE - 200)}
    too_much = {"messages": [near_limit] * 9}  # each fits, together over max_write_bytes
    assert error_of(http.post(path, json=too_much), 413)["code"] == "payload_too_large"
    assert_nothing_stored(http, session_key)


def test_nul_bytes_are_kept_exactly(http: httpx.Client, session_key: str) -> None:
    message = {
        "role": "user",
        "blocks": [{"block_type": "text", "text": "a\u0000b"}],
        "additional_kwargs": {"k\u0000": "v\u0000"},
    }
    assert http.post(
        session_path(session_key, "/messages"), json={"messages": [message]}
    ).is_success
    assert http.get(session_path(session_key, "/messages")).json()["messages"] == [message]


@pytest.mark.parametrize(
    "raw_message",
    [
        '{"role": "user", "content": "\\ud800"}',
        '{"role": "user", "content": "ok", "additional_kwargs": {"x": "\\udfff tail"}}',
        '{"role": "user", "blocks": [{"block_type": "text", "text": "\\ud83d"}]}',
    ],
)
def test_lone_surrogates_are_422(http: httpx.Client, session_key: str, raw_message: str) -> None:
    body = '{"messages": [' + raw_message + "]}"
    answer = http.post(session_path(session_key, "/messages"), content=body.encode(),
                       headers={"Content-Type": "application/json"})  # fmt: skip
    assert error_of(answer, 422)["code"] == "invalid_message"
    assert_nothing_stored(http, session_key)


@pytest.mark.parametrize(
    "body",
    [
        {"messages": [{"role": "wizard", "content": "hi"}]},
        {"messages": [{"role": 1, "content": "hi"}]},
        {"messages": [{"content": "hi"}]},
        {"messages": "hi"},
        {"messages": [["user", "hi"]]},
        {"messages": [{"role": "user", "content": 5}]},
        {"messages": [{"role": "user", "content": "hi", "blocks": []}]},
        {"messages": [{"role": "user", "blocks": [{"block_type": "laser", "text": "x"}]}]},
        {"messages": [{"role": "user", "blocks": [{"block_type": "text", "text": 3}]}]},
        {"messages": [{"role": "user", "content": "hi", "additional_kwargs": []}]},
        {"messages": [{"role": "user", "content": "hi", "extra": 1}]},
        {"messages": [USER], "extra": True},
        [USER],
        "just a string",
    ],
)
def test_wrong_shapes_and_types_are_422(http: httpx.Client, session_key: str, body: Any) -> None:
    for method in ("POST", "PUT"):
        answer = http.request(method, session_path(session_key, "/messages"), json=body)
        assert error_of(answer, 422)["code"] in ("invalid_request", "invalid_message")
    assert_nothing_stored(http, session_key)


@pytest.mark.parametrize(
    ("message", "says"),
    [
        ({"role": "wizard", "content": "hi"}, "role must be one of"),
        ({"role": "wizard", "blocks": []}, "role must be one of"),
        ({"role": "user", "content": "hi", "blocks": []}, "not both"),
        ({"role": "user", "text": "hi"}, "unknown message fields: text"),
        ({"role": "user", "content": 3}, "'content' must be a string"),
        ({"role": "user", "blocks": [{"block_type": "text", "text": 3}]}, "blocks[0].text"),
    ],
)
def test_a_refused_message_is_named_with_its_place_and_problem(
    http: httpx.Client, session_key: str, message: dict[str, Any], says: str
) -> None:
    # Messages are checked once, by the ledger: the answer names which message of the write
    # and what is wrong with it.
    body = {"messages": [USER, message]}
    answer = http.post(session_path(session_key, "/messages"), json=body)
    error = error_of(answer, 422)
    assert error["code"] == "invalid_message" and error["details"] == {"index": 1}
    assert error["message"].startswith("messages[1]: ") and says in error["message"]
    assert_nothing_stored(http, session_key)


@pytest.mark.parametrize(
    "content",
    [b"{bad json", b'{"messages": [', b"\xff\xfe{}", b'{"messages": [] ]', b"[" * 50_000],
)
def test_malformed_json_is_400(http: httpx.Client, session_key: str, content: bytes) -> None:
    answer = http.post(session_path(session_key, "/messages"), content=content,
                       headers={"Content-Type": "application/json"})  # fmt: skip
    assert error_of(answer, 400)["code"] == "malformed_json"
    assert_nothing_stored(http, session_key)


def test_a_body_that_is_not_json_is_refused(http: httpx.Client, session_key: str) -> None:
    answer = http.post(session_path(session_key, "/messages"), content=b"role=user",
                       headers={"Content-Type": "application/x-www-form-urlencoded"})  # fmt: skip
    assert 400 <= answer.status_code < 500 and "error" in answer.json()
    assert_nothing_stored(http, session_key)


@pytest.mark.parametrize("method", ["POST", "PUT", "DELETE"])
def test_a_reason_with_nul_is_422_on_every_store(
    http: httpx.Client, session_key: str, method: str
) -> None:
    # A reason may hold control characters, but PostgreSQL's text columns refuse NUL: the
    # ledger refuses it everywhere (this was a 500 on PostgreSQL).
    body = {"messages": [USER]} if method != "DELETE" else None
    answer = http.request(
        method, session_path(session_key, "/messages"), params={"reason": "why\x00"}, json=body
    )
    assert "must not contain NUL" in error_of(answer, 422)["message"]
    assert_nothing_stored(http, session_key)


@pytest.mark.parametrize(
    "segment",
    ["%FF", "%ED%A0%80", "%00", "a%0Ab", "%7F", "x" * 513, "%C3%28"],
    ids=["bad-utf8", "surrogate", "nul", "newline", "del", "too-long", "bad-utf8-2"],
)
def test_bad_session_keys_are_422_on_every_route(http: httpx.Client, segment: str) -> None:
    for method, suffix, body in [
        ("POST", "/messages", {"messages": [USER]}), ("PUT", "/messages", {"messages": []}),
        ("GET", "/messages", None), ("GET", "/context", None), ("GET", "", None),
        ("DELETE", "/messages", None), ("DELETE", "/messages/last", None),
    ]:  # fmt: skip
        answer = http.request(method, f"/v1/sessions/{segment}{suffix}", json=body)
        assert error_of(answer, 422)["code"] == "invalid_session_key", (method, suffix)


@pytest.mark.parametrize(
    "headers",
    [
        {"If-Match": "abc"}, {"If-Match": '"1", "2"'}, {"If-Match": 'W/"1"'},
        {"If-None-Match": '"3"'},
        {"Idempotency-Key": "k" * 300}, {"Idempotency-Key": "a\tb"},
    ],
)  # fmt: skip
def test_malformed_write_headers_are_422(
    http: httpx.Client, session_key: str, headers: dict[str, str]
) -> None:
    answer = http.post(session_path(session_key, "/messages"), json={"messages": [USER]},
                       headers=headers)  # fmt: skip
    assert error_of(answer, 422)["code"] in ("invalid_request", "invalid_input")
    assert_nothing_stored(http, session_key)


def test_if_match_with_if_none_match_star_cannot_hold(http: httpx.Client, session_key: str) -> None:
    answer = http.post(session_path(session_key, "/messages"), json={"messages": [USER]},
                       headers={"If-Match": '"1"', "If-None-Match": "*"})  # fmt: skip
    assert error_of(answer, 412)["code"] == "precondition_failed"
    assert_nothing_stored(http, session_key)


@pytest.mark.parametrize(
    "path",
    [
        "/messages/abc", "/messages/1.5", f"/messages/{10**30}",
        "/messages?status=deleted", "/messages?offset=-1", "/messages?limit=x",
        f"/messages?offset={10**30}", "/context?token_limit=-1", "/context?token_limit=abc",
        "/context?initial_token_count=-5.5",
    ],
)  # fmt: skip
def test_bad_numbers_and_enums_are_422(http: httpx.Client, session_key: str, path: str) -> None:
    http.post(session_path(session_key, "/messages"), json={"messages": [USER]})
    method = "DELETE" if path.startswith("/messages/") else "GET"
    answer = http.request(method, session_path(session_key) + path)
    assert error_of(answer, 422)["code"] == "invalid_request"
    assert http.get(session_path(session_key)).json()["message_count"] == 1


@pytest.mark.parametrize(
    "query",
    ["limit=0", "limit=100000", "prefix=%00", "cursor=a%0Ab", "prefix=" + "p" * 600],
)
def test_bad_session_list_queries_are_refused(http: httpx.Client, query: str) -> None:
    answer = http.get(f"/v1/sessions?{query}")
    assert answer.status_code == 422, answer.text


@pytest.mark.parametrize(
    "path",
    ["/v1/sessions?prefix=%FF", "/v1/sessions?prefix=%ED%A0%80", "/v1/session-heads?prefix=%FF",
     "/v1/sessions?cursor=%C3", "/v1/sessions/k/messages?status=%FF"],
)  # fmt: skip
def test_a_query_that_is_not_utf_8_is_refused_not_read_as_u_fffd(
    http: httpx.Client, path: str
) -> None:
    """A session key's bytes that are not UTF-8 are refused; so are a query's (Starlette
    read them as U+FFFD, and the server answered for a prefix never sent)."""
    answer = http.get(path)
    assert error_of(answer, 422)["message"] == "a query parameter is not percent-encoded UTF-8"


@pytest.mark.parametrize(
    "body", [{"role": "root"}, {"role": "agent", "name": "n" * 201}, {"role": "agent", "x": 1},
             {}, {"role": "agent", "name": "tab\there"}],
)  # fmt: skip
def test_bad_key_requests_are_422(deployment: Deployment, body: dict[str, Any]) -> None:
    with deployment.raw("a_admin") as admin:
        before = len(admin.get("/v1/keys").json()["keys"])
        answer = admin.post("/v1/keys", json=body)
        assert answer.status_code == 422, answer.text
        assert len(admin.get("/v1/keys").json()["keys"]) == before


def test_unknown_routes_and_methods_use_the_error_shape(http: httpx.Client) -> None:
    assert error_of(http.get("/v1/nothing"), 404)["code"] == "not_found"
    assert error_of(http.patch("/v1/sessions/x/messages"), 405)["code"] == "method_not_allowed"


# 49 messages of 2,000 characters: about 100 KB, over LEDGER_LOOP_WRITE_MAX_BYTES (64
# KiB), so decoded in parts, off the loop
_MANY = ", ".join(
    [json.dumps({"role": "user", "content": "x" * 2000})]
    * (int(LIMITS["LEDGER_MAX_MESSAGES_PER_WRITE"]) - 1)
)


@pytest.mark.parametrize(
    "body",
    [
        b'{"messages": [{"role": "user", "content": "A"}], "messages": []}',
        b'{"messages": [{"role": "user", "content": "x", "role": "assistant"}]}',
        b'{"messages": [{"role": "user", "blocks": [{"block_type": "text", "text": "a",'
        b' "text": "b"}]}]}',
        f'{{"messages": [{_MANY}], "messages": []}}'.encode(),
        f'{{"messages": [{_MANY}, {{"role": "user", "role": "tool"}}]}}'.encode(),
    ],
    ids=["top", "message", "block", "top, in parts", "message, in parts"],
)
def test_a_body_that_names_a_key_twice_is_refused(
    http: httpx.Client, session_key: str, body: bytes
) -> None:
    """Which value was meant? A proxy that read the first and the server the last would
    disagree on what was stored: 422, nothing stored (also for a body decoded in parts)."""
    answer = http.post(f"{session_path(session_key)}/messages", content=body,
                       headers={"Content-Type": "application/json"})  # fmt: skip
    assert "is repeated in one object" in error_of(answer, 422)["message"]
    assert_nothing_stored(http, session_key)


def test_a_write_header_sent_twice_is_one_list_not_its_first_line(
    http: httpx.Client, session_key: str
) -> None:
    """Two If-Match lines are the list they make (refused, as `"2", "1"` is), not the
    first line with the second ignored; two Authorization lines are refused."""
    path = f"{session_path(session_key)}/messages"
    written = http.post(path, json={"messages": [{"role": "user", "content": "x"}]}).json()
    now = f'"{written["version"]}"'
    answer = http.post(path, json={"messages": [{"role": "user", "content": "y"}]},
                       headers=[("If-Match", now), ("If-Match", '"1"')])  # fmt: skip
    assert error_of(answer, 422)["code"] == "invalid_request"
    auth = http.headers["Authorization"]
    twice = httpx.post(str(http.base_url.join(path)),
                       json={"messages": [{"role": "user", "content": "z"}]},
                       headers=[("Authorization", auth), ("Authorization", auth)])  # fmt: skip
    assert error_of(twice, 401)["message"] == "send one Authorization header, not several"
    assert http.get(session_path(session_key)).json()["message_count"] == 1


def test_a_key_request_or_an_erasure_naming_a_key_twice_is_refused(
    deployment: Deployment, session_key: str
) -> None:
    """`{"role": "agent", "role": "admin"}` made an admin key: every body is read alike."""
    with deployment.raw("a_admin") as admin:
        for path, body in (
            ("/v1/keys", b'{"role": "agent", "name": "n", "role": "admin"}'),
            (f"{session_path(session_key)}/hold",
             b'{"reference": "a", "reason": "r", "reference": "b"}'),
        ):  # fmt: skip
            answer = admin.post(path, content=body, headers={"Content-Type": "application/json"})
            assert "is repeated in one object" in error_of(answer, 422)["message"], path
        assert all(k["name"] != "n" for k in admin.get("/v1/keys").json()["keys"])
