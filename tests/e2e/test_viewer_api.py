"""The reads the audit viewer stands on, over HTTP against a real server on each store:
session heads by page, verify, replay with the window's token count, the diff of two
versions; and the viewer's own files with their Content-Security-Policy."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from session_ledger.api.client import session_path

from .conftest import Deployment, Server, server_env


def msg(text: str, role: str = "user") -> dict[str, str]:
    return {"role": role, "content": text}


def write(raw: httpx.Client, key: str, method: str, messages: list[Any] | None = None) -> None:
    body = None if messages is None else {"messages": messages}
    raw.request(method, f"{session_path(key)}/messages", json=body).raise_for_status()


def test_session_heads_page_by_key_with_status(deployment: Deployment) -> None:
    prefix = f"heads-{uuid.uuid4().hex[:8]}/"
    with deployment.raw("a_agent") as agent:
        for name in ("a", "b", "c"):
            write(agent, prefix + name, "POST", [msg("one"), msg("two")])
        write(agent, prefix + "b", "DELETE")
    with deployment.raw("a_auditor") as auditor:
        first = auditor.get("/v1/session-heads", params={"prefix": prefix, "limit": 2}).json()
        assert [s["key"] for s in first["sessions"]] == [prefix + "a", prefix + "b"]
        assert first["next_cursor"] == prefix + "b"
        assert [s["status"] for s in first["sessions"]] == ["active", "cleared"]
        assert first["sessions"][0]["message_count"] == 2 and first["sessions"][0]["version"] == 2
        after = {"prefix": prefix, "cursor": first["next_cursor"]}
        rest = auditor.get("/v1/session-heads", params=after).json()
        assert [s["key"] for s in rest["sessions"]] == [prefix + "c"] and not rest["next_cursor"]
        assert auditor.get("/v1/session-heads", params={"limit": 0}).status_code == 422
    with deployment.raw("b_agent") as other_tenant:
        seen = other_tenant.get("/v1/session-heads", params={"prefix": prefix}).json()
        assert seen["sessions"] == []
    with deployment.raw() as nobody:
        assert nobody.get("/v1/session-heads").status_code == 401


def test_verify_recomputes_the_chain_for_the_callers_tenant_only(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.raw("a_agent") as agent:
        write(agent, session_key, "POST", [msg("one")])
        write(agent, session_key, "PUT", [msg("two")])
    with deployment.raw("a_auditor") as auditor:
        check = auditor.get(f"{session_path(session_key)}/verify").json()
    assert check["intact"] and check["versions"] == 3 and len(check["head"]) == 64
    assert check["first_bad_version"] is None and check["problem"] is None
    with deployment.raw("b_agent") as other_tenant:
        answer = other_tenant.get(f"{session_path(session_key)}/verify")
    assert answer.status_code == 404
    assert answer.json()["error"]["code"] == "session_not_found"


def test_replay_gives_the_head_and_window_then_with_its_token_count(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.raw("a_agent") as agent:
        write(agent, session_key, "POST", [msg("one two three"), msg("four five", "assistant")])
        write(agent, session_key, "POST", [msg("six seven eight nine")])
    path = f"{session_path(session_key)}/replay"
    with deployment.raw("a_auditor") as auditor:
        then = auditor.get(path, params={"as_of_version": 2, "token_limit": 100})
        assert then.headers["ETag"] == '"3"'  # as every answer about a session: its version now
        replay = then.json()
        assert replay["session"]["version"] == 2 and replay["session"]["message_count"] == 2
        window = replay["window"]
        # whitespace tokens: 3, then 2 more with the joining space counted as the buffer does
        assert window["token_count"] == 5 and window["token_limit"] == 100
        assert [m["blocks"][0]["text"] for m in window["messages"]] == [
            "one two three",
            "four five",
        ]
        now = auditor.get(path, params={"token_limit": 5, "initial_token_count": 1}).json()
        assert now["session"]["version"] == 3
        assert now["window"]["token_count"] == 5 and len(now["window"]["messages"]) == 1
        at = auditor.get(path, params={"as_of": replay["session"]["updated_at"]}).json()
        assert at["session"]["version"] == 2
        default = auditor.get(path).json()["window"]
        assert default["token_limit"] == 3000 and default["token_count"] == 9
        assert auditor.get(path, params={"as_of_version": 9}).status_code == 404
        both = auditor.get(path, params={"as_of_version": 1, "as_of": "2020-01-01T00:00:00Z"})
        assert both.status_code == 422
        assert auditor.get(path, params={"token_limit": 0}).status_code == 422


def test_diff_names_what_was_added_removed_and_replaced(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.raw("a_agent") as agent:
        write(agent, session_key, "POST", [msg("a"), msg("b"), msg("c"), msg("d")])  # v2
        write(agent, session_key, "PUT", [msg("a"), msg("B"), msg("c"), msg("d"), msg("e")])
        agent.delete(f"{session_path(session_key)}/messages/0").raise_for_status()  # v4
    path = f"{session_path(session_key)}/diff"

    def changes(old: int, new: int) -> list[tuple[str, int, int, list[str], list[str]]]:
        with deployment.raw("a_auditor") as auditor:
            diff = auditor.get(path, params={"from_version": old, "to_version": new}).json()
        return [
            (c["kind"], c["from_position"], c["to_position"],
             [m["blocks"][0]["text"] for m in c["removed"]],
             [m["blocks"][0]["text"] for m in c["added"]])
            for c in diff["changes"]
        ]  # fmt: skip

    assert changes(2, 3) == [("replaced", 1, 1, ["b"], ["B"]), ("added", 4, 4, [], ["e"])]
    assert changes(3, 4) == [("removed", 0, 0, ["a"], [])]
    assert changes(1, 2) == [("added", 0, 0, [], ["a", "b", "c", "d"])]
    assert changes(4, 4) == []
    with deployment.raw("a_auditor") as auditor:
        assert auditor.get(path, params={"from_version": 1, "to_version": 9}).status_code == 404
        assert auditor.get(path, params={"from_version": 1}).status_code == 422


def test_the_viewer_is_served_under_a_content_security_policy(deployment: Deployment) -> None:
    with deployment.raw() as browser:  # the page itself needs no key; its data does
        page = browser.get("/ui")
        script = browser.get("/ui/app.js")
        assert browser.get("/ui/no-such-file.js").status_code == 404
    assert page.status_code == 200 and page.headers["content-type"].startswith("text/html")
    assert script.headers["content-type"].startswith("text/javascript")
    for answer in (page, script):
        policy = answer.headers["content-security-policy"]
        assert "script-src 'self'" in policy and "default-src 'none'" in policy
        assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
        assert answer.headers["x-content-type-options"] == "nosniff"
    assert "<script" not in page.text.replace('<script type="module" src="/ui/app.js">', "")


@pytest.mark.slow
def test_the_viewer_can_be_turned_off(tmp_path: Any) -> None:
    server = Server(server_env(f"sqlite:///{tmp_path / 'ledger.db'}", LEDGER_UI="false")).start()
    try:
        assert httpx.get(f"{server.base_url}/ui").status_code == 404
        assert httpx.get(f"{server.base_url}/healthz").status_code == 200
    finally:
        server.stop()
