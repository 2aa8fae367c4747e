"""`GET .../messages` answers a page and the cursor of the next, of the first page's version
whatever is written between; `/context` refuses a window over the answer bytes (413)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings

PATH = "/v1/sessions/chat"
PAGE = 3


@pytest.fixture
def http() -> Iterator[TestClient]:
    settings = Settings(database_url="memory://", tokenizer="whitespace",
                        max_page_messages=PAGE, max_answer_bytes=4096)  # fmt: skip
    ledger = open_ledger(settings)
    store = MemoryKeyStore()
    _, secret = store.create("acme", "agent")
    app = create_app(settings, ledger=ledger, key_store=store)
    try:
        with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as client:
            yield client
    finally:
        ledger.close()


def put(http: TestClient, *texts: str) -> None:
    body = {"messages": [{"role": "user", "content": t} for t in texts]}
    assert http.post(f"{PATH}/messages", json=body).status_code == 200


def contents(answer: Any) -> list[str]:
    return [m["blocks"][0]["text"] for m in answer.json()["messages"]]


def read_all(http: TestClient, **params: Any) -> tuple[list[str], list[str]]:
    """Every page's messages and ETag, following `next_cursor` (which names where and at
    which version: `last` and `as_of_version` are for the first page)."""
    found, tags = [], []
    answer = http.get(f"{PATH}/messages", params=params)
    while True:
        assert answer.status_code == 200, answer.text
        found += contents(answer)
        tags.append(answer.headers["ETag"])
        cursor = answer.json()["next_cursor"]
        if cursor is None:
            return found, tags
        follow = {k: v for k, v in params.items() if k not in ("last", "as_of_version")}
        answer = http.get(f"{PATH}/messages", params={"cursor": cursor, **follow})


def test_pages_follow_their_cursor_to_the_last(http: TestClient) -> None:
    put(http, *[f"m{i}" for i in range(7)])
    first = http.get(f"{PATH}/messages")
    assert contents(first) == ["m0", "m1", "m2"] and first.json()["next_cursor"]
    found, tags = read_all(http)
    assert found == [f"m{i}" for i in range(7)] and set(tags) == {'"2"'}


def test_a_cursor_keeps_its_version_while_others_write(http: TestClient) -> None:
    put(http, *[f"m{i}" for i in range(7)])
    first = http.get(f"{PATH}/messages")
    put(http, "later")
    assert http.delete(f"{PATH}/messages/4").status_code == 200
    second = http.get(f"{PATH}/messages", params={"cursor": first.json()["next_cursor"]})
    assert contents(second) == ["m3", "m4", "m5"] and second.headers["ETag"] == '"2"'
    found, tags = read_all(http)
    assert found == ["m0", "m1", "m2", "m3", "m5", "m6", "later"] and set(tags) == {'"4"'}


def test_a_limit_over_the_page_size_gets_a_page_and_a_cursor(http: TestClient) -> None:
    put(http, *[f"m{i}" for i in range(5)])
    answer = http.get(f"{PATH}/messages", params={"limit": 1000})
    assert contents(answer) == ["m0", "m1", "m2"] and answer.json()["next_cursor"]
    assert read_all(http, limit=2)[0] == [f"m{i}" for i in range(5)]
    last = http.get(f"{PATH}/messages", params={"offset": 2})
    assert contents(last) == ["m2", "m3", "m4"] and last.json()["next_cursor"] is None


def test_a_page_ends_before_the_answer_bytes(http: TestClient) -> None:
    put(http, "a" * 3000, "b" * 3000, "c")
    found = http.get(f"{PATH}/messages")
    assert [len(t) for t in contents(found)] == [3000] and found.json()["next_cursor"]
    assert [len(t) for t in read_all(http)[0]] == [3000, 3000, 1]


def test_last_starts_at_the_newest_and_pages_on_of_one_version(http: TestClient) -> None:
    put(http, *[f"m{i}" for i in range(9)])
    first = http.get(f"{PATH}/messages", params={"last": 5})
    assert contents(first) == ["m4", "m5", "m6"] and first.json()["next_cursor"]
    put(http, "later")
    found, tags = read_all(http, last=5)
    assert found == ["m5", "m6", "m7", "m8", "later"] and set(tags) == {'"3"'}
    rest = http.get(f"{PATH}/messages", params={"cursor": first.json()["next_cursor"]})
    assert contents(rest) == ["m7", "m8"] and rest.headers["ETag"] == '"2"'
    assert read_all(http, last=2, as_of_version=2)[0] == ["m7", "m8"]
    assert read_all(http, last=100)[0] == [f"m{i}" for i in range(9)] + ["later"]
    assert contents(http.get(f"{PATH}/messages", params={"last": 0})) == []
    assert contents(http.get(f"{PATH}/messages", params={"last": 4, "limit": 1})) == ["m6"]


def test_last_of_an_unknown_session_is_not_found(http: TestClient) -> None:
    answer = http.get("/v1/sessions/nobody/messages", params={"last": 3})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "session_not_found"


@pytest.mark.parametrize(
    "params",
    [{"cursor": "nonsense"}, {"cursor": "0-1"}, {"cursor": "2-1", "offset": 1},
     {"cursor": "2-1", "as_of_version": 2}, {"cursor": "9" * 65}, {"cursor": "2-1", "last": 1},
     {"last": -1}, {"last": "x"}, {"last": 2, "offset": 1}, {"last": 10**19}],
)  # fmt: skip
def test_a_cursor_the_history_did_not_give_is_refused(
    http: TestClient, params: dict[str, Any]
) -> None:
    put(http, *[f"m{i}" for i in range(5)])
    answer = http.get(f"{PATH}/messages", params=params)
    assert answer.status_code == 422, answer.text
    assert answer.json()["error"]["code"] in ("invalid_input", "invalid_request")


def test_a_cursor_past_the_sessions_versions_is_not_found(http: TestClient) -> None:
    put(http, "m0")
    answer = http.get(f"{PATH}/messages", params={"cursor": "9-1"})
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "state_not_found"


def test_a_window_over_the_answer_bytes_is_413(http: TestClient) -> None:
    put(http, "w " * 1500, "v " * 1500)
    assert contents(http.get(f"{PATH}/context", params={"token_limit": 1500})) == ["v " * 1500]
    answer = http.get(f"{PATH}/context", params={"token_limit": 10**9})
    assert answer.status_code == 413, answer.text
    error = answer.json()["error"]
    assert error["code"] == "answer_too_large" and "token_limit" in error["message"]


def test_the_diff_reads_histories_longer_than_a_page(http: TestClient) -> None:
    put(http, *[f"m{i}" for i in range(7)])
    assert http.delete(f"{PATH}/messages/1").status_code == 200
    put(http, "later")
    diff = http.get(f"{PATH}/diff", params={"from_version": 2, "to_version": 4})
    assert diff.status_code == 200, diff.text
    found = diff.json()
    assert (found["from_count"], found["to_count"]) == (7, 7)
    runs = [(c["kind"], c["from_position"], len(c["removed"]), len(c["added"]))
            for c in found["changes"]]  # fmt: skip
    assert runs == [("removed", 1, 1, 0), ("added", 7, 0, 1)]


def test_a_diff_over_the_answer_bytes_is_413(http: TestClient) -> None:
    put(http, "a" * 3000)
    assert http.put(f"{PATH}/messages", json={"messages": [
        {"role": "user", "content": "b" * 3000}]}).status_code == 200  # fmt: skip
    answer = http.get(f"{PATH}/diff", params={"from_version": 2, "to_version": 3})
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "answer_too_large"
