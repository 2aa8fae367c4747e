"""Streams over HTTP on a real server (SQLite and PostgreSQL): open, chunks, complete,
abort, the refusals; a stream left open is aborted by the server after its timeout."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx

from .conftest import Deployment, Server, run_cli, server_env


def url(key: str, *rest: str) -> str:
    return "/".join([f"/v1/sessions/{quote(key, safe='')}/streams", *rest])


def test_open_chunks_complete(deployment: Deployment, session_key: str) -> None:
    with deployment.raw("a_agent") as api:
        opened = api.post(url(session_key), json={"role": "assistant", "turn": "t1"})
        assert opened.status_code == 201, opened.text
        sid = opened.json()["stream_id"]
        for batch in (["Hel", "lo"], [", wor"]):
            assert (
                api.post(url(session_key, sid, "chunks"), json={"deltas": batch}).status_code == 200
            )
        done = api.post(url(session_key, sid, "complete"), json={"deltas": ["ld"]})
        assert done.status_code == 200 and done.json()["message_count"] == 1
        history = api.get(f"/v1/sessions/{quote(session_key, safe='')}/messages").json()
        assert [m["blocks"][0]["text"] for m in history["messages"]] == ["Hello, world"]
        late = api.post(url(session_key, sid, "chunks"), json={"deltas": ["late"]})
        assert late.status_code == 409 and late.json()["error"]["code"] == "stream_conflict"
        state = api.get(url(session_key, sid)).json()
        assert state["state"] == "completed" and state["text"] == "Hello, world"
        assert api.get(url(session_key, "nope")).status_code == 404


def test_a_stream_id_of_any_characters_is_named_percent_encoded(
    deployment: Deployment, session_key: str
) -> None:
    """An id given at opening (a space, `/`, `%`, `<`, an `é`) names its stream in every
    later path, percent-encoded as one segment; bytes that are not UTF-8 are refused."""
    with deployment.raw("a_agent") as api:
        for given in ("turn 1", "a/b", "50%", "<b>", "café"):
            opened = api.post(url(session_key), json={"stream_id": given})
            assert opened.status_code == 201 and opened.json()["stream_id"] == given
            sid = quote(given, safe="")
            assert (
                api.post(url(session_key, sid, "chunks"), json={"deltas": ["x"]}).status_code == 200
            )
            assert api.post(url(session_key, sid, "complete"), json={}).status_code == 200
            state = api.get(url(session_key, sid)).json()
            assert (state["stream_id"], state["state"], state["text"]) == (given, "completed", "x")
        bad = api.post(url(session_key, "%FF", "chunks"), json={"deltas": ["x"]})
        assert bad.status_code == 422 and "percent-encoded UTF-8" in bad.text


def test_abort_keeps_the_partial_out_of_the_history(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.raw("a_agent") as api:
        sid = api.post(url(session_key), json={}).json()["stream_id"]
        api.post(url(session_key, sid, "chunks"), json={"deltas": ["half an"]})
        aborted = api.post(
            url(session_key, sid, "abort"), json={"cause": "client_gone", "deltas": [" answer"]}
        )
        assert aborted.status_code == 200, aborted.text
        events = api.get(f"/v1/sessions/{quote(session_key, safe='')}/events").json()["events"]
        last = events[-1]
        assert last["event_type"] == "StreamAborted"
        assert last["changes"]["partial"] == "half an answer" and last["changes"]["aborted"]
        assert api.get(f"/v1/sessions/{quote(session_key, safe='')}/messages").json() == {
            "messages": [],
            "next_cursor": None,
        }
        bad = api.post(url(session_key, sid, "abort"), json={"cause": "bored"})
        assert bad.status_code == 422
        assert api.post(url(session_key, sid, "abort"), json={"cause": "error"}).status_code == 409


def test_a_nul_in_turn_or_parent_and_a_keep_partial_not_a_boolean_are_refused(
    deployment: Deployment, session_key: str
) -> None:
    """422 on both stores (PostgreSQL's text holds no NUL: it was a 500 there), nothing
    stored; `keep_partial` is true or false, not "yes" or 1 (which kept the partial)."""
    with deployment.raw("a_agent") as api:
        for body in (r'{"turn": "\u0000"}', r'{"parent": "a\u0000"}', r'{"turn": "\ud800"}'):
            refused = api.post(url(session_key), content=body,
                               headers={"Content-Type": "application/json"})  # fmt: skip
            assert refused.status_code == 422, (body, refused.text)
        head = f"/v1/sessions/{quote(session_key, safe='')}"
        assert api.get(head).status_code == 404  # (no write made the session)
        sid = api.post(url(session_key), json={}).json()["stream_id"]
        api.post(url(session_key, sid, "chunks"), json={"deltas": ["half"]})
        version = api.get(head).json()["version"]
        for flag in ("yes", 1, "true", None):
            body = {"cause": "error", "keep_partial": flag}
            assert api.post(url(session_key, sid, "abort"), json=body).status_code == 422, flag
        assert api.get(head).json()["version"] == version


WRITER = """
import sys, time
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
ledger = open_ledger(Settings(database_url=sys.argv[1], tokenizer="whitespace",
                              stream_flush_bytes=1))
with ledger.stream("killed mid-stream") as s:
    s.write("the user read this")
    print(s.stream_id, flush=True)
    time.sleep(600)
"""


def wait_for_end(api: httpx.Client, key: str, sid: str) -> dict[str, Any]:
    deadline = time.monotonic() + 30
    while (state := api.get(url(key, sid)).json())["state"] == "open":
        assert time.monotonic() < deadline, f"stream {sid} of {key} was never aborted"
        time.sleep(0.2)
    return state


def test_streams_left_open_are_aborted_by_the_server(tmp_path: Path) -> None:
    """A process killed mid-stream, and an HTTP client that went away: the server (started
    after the kill) aborts both once they are idle past the timeout."""
    database = f"sqlite:///{tmp_path / 'ledger.db'}"
    env = server_env(database, LEDGER_STREAM_TIMEOUT_SECONDS="1")
    assert run_cli(env, "migrate").returncode == 0
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, database], env=env, stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout is not None
    killed_sid = writer.stdout.readline().strip()
    writer.kill()  # SIGKILL: no __exit__, no abort
    writer.wait()
    server = Server(env).start()
    try:
        key = run_cli(server.env, "keys", "create", "--role", "agent").stdout
        key = key.split("key: ")[1].strip()
        with httpx.Client(
            base_url=server.base_url, timeout=30, headers={"Authorization": f"Bearer {key}"}
        ) as api:
            sid = api.post(url("left open"), json={}).json()["stream_id"]
            api.post(url("left open", sid, "chunks"), json={"deltas": ["and then"]})
            left = wait_for_end(api, "left open", sid)
            killed = wait_for_end(api, "killed mid-stream", killed_sid)
    finally:
        server.stop()
    assert left["state"] == "aborted" and left["cause"] == "timeout"
    assert left["text"] == "and then"
    assert killed["state"] == "aborted" and killed["cause"] == "timeout"
    assert killed["text"] == "the user read this"
