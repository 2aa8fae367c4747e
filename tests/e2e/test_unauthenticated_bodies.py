"""Against a real server: a body is read only once its caller is authenticated (a
malformed body without a valid key answers 401, not the 400 its decoding would), and a
write of too many messages answers one 413 before its messages are validated.
tests/integration/test_unauthenticated_bodies.py counts what the server does."""

from __future__ import annotations

import httpx
import pytest

from session_ledger.api.client import session_path

from .conftest import LIMITS, Deployment
from .test_bad_input import error_of

MAX_MESSAGES = int(LIMITS["LEDGER_MAX_MESSAGES_PER_WRITE"])
MALFORMED = b'{"messages": [{}, {}, '
JSON = {"Content-Type": "application/json"}
ROUTES = [
    ("POST", "/v1/sessions/unauth-body/messages"),
    ("PUT", "/v1/sessions/unauth-body/messages"),
    ("POST", "/v1/sessions/unauth-body/streams"),
    ("POST", "/v1/sessions/unauth-body/erase"),
    ("POST", "/v1/keys"),
]


@pytest.mark.parametrize(("method", "path"), ROUTES)
def test_a_body_without_a_valid_key_is_not_decoded(
    deployment: Deployment, method: str, path: str
) -> None:
    with deployment.raw() as http:
        for key in (None, "sl_not_a_real_key_000000000000000000"):
            headers = JSON if key is None else {**JSON, "Authorization": f"Bearer {key}"}
            answer = http.request(method, path, content=MALFORMED, headers=headers)
            assert error_of(answer, 401)["code"] == "unauthenticated"
            assert answer.headers["WWW-Authenticate"] == 'Bearer realm="session-ledger"'
    with deployment.raw("a_admin") as http:
        answer = http.request(method, path, content=MALFORMED, headers=JSON)
        assert error_of(answer, 400)["code"] == "malformed_json"


@pytest.mark.parametrize("item", [b"{}", b"[]"])
@pytest.mark.parametrize("count", [MAX_MESSAGES + 1, 60_000])  # under and over 64 KiB
def test_too_many_messages_answer_one_413(
    deployment: Deployment, session_key: str, item: bytes, count: int
) -> None:
    body = b'{"messages": [' + b",".join([item] * count) + b"]}"
    path = session_path(session_key, "/messages")
    with deployment.raw("a_agent") as http:
        for method in ("POST", "PUT"):
            answer = http.request(method, path, content=body, headers=JSON)
            error = error_of(answer, 413)
            assert error["code"] == "payload_too_large"
            assert error["details"] == {}
            assert error["message"].endswith(f"the limit is {MAX_MESSAGES}")
        assert http.get(session_path(session_key)).status_code == 404


def test_an_authenticated_write_still_succeeds(deployment: Deployment, session_key: str) -> None:
    messages = [{"role": "user", "content": "hi"}] * MAX_MESSAGES
    with httpx.Client(base_url=deployment.base_url, timeout=60) as http:
        headers = {"Authorization": f"Bearer {deployment.keys['a_agent']}"}
        answer = http.post(session_path(session_key, "/messages"), json={"messages": messages},
                           headers=headers)  # fmt: skip
        assert answer.status_code == 200, answer.text
        assert answer.json()["message_count"] == MAX_MESSAGES
