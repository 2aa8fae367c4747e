"""Reads and exports leave a trace: an auditor's reads and every export appear in the
tenant's access log with the right actor, what was read and how many records; agents'
own reads do not (by default); and the log's own chain verifies."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

from .conftest import Deployment, run_cli


def entries_of(deployment: Deployment, key: str | None, **where: str) -> list[dict[str, Any]]:
    """The access log entries about session `key` (None: a search) whose parameters
    include `where`."""
    found, after = [], 0
    with deployment.raw("a_auditor") as http:
        while True:
            page = http.get("/v1/access-log", params={"after": after, "limit": 1000}).json()
            found += [e for e in page["entries"] if e["session_key"] == key
                      and where.items() <= e["parameters"].items()]  # fmt: skip
            if page["next_after"] is None:
                return found
            after = page["next_after"]


def test_auditor_reads_and_exports_are_logged_with_their_actor(
    deployment: Deployment, session_key: str
) -> None:
    path = f"/v1/sessions/{quote(session_key, safe='')}"
    with deployment.client("a_agent") as agent:
        agent.put_messages(session_key, [{"role": "user", "content": f"m{i}"} for i in range(5)])
        agent.get(session_key, token_limit=1000)  # an agent's own read: not logged
    with deployment.raw("a_auditor") as auditor:
        assert auditor.get(f"{path}/messages", params={"limit": 3}).status_code == 200
        assert auditor.get(f"{path}/context", params={"token_limit": 1000}).status_code == 200
        assert auditor.get(f"{path}/events").status_code == 200
        assert auditor.get(f"{path}/export").status_code == 200
    with deployment.raw("a_admin") as admin:
        assert admin.get(f"{path}/export", params={"format": "csv"}).status_code == 200
    entries = entries_of(deployment, session_key)
    auditor_id = f"key:{deployment.key_ids['a_auditor']}"
    assert [(e["actor"], e["role"], e["action"], e["parameters"], e["records"])
            for e in entries[:4]] == [
        (auditor_id, "auditor", "transcript", {"limit": "3"}, 3),
        (auditor_id, "auditor", "window", {"token_limit": "1000"}, 5),
        (auditor_id, "auditor", "audit", {}, 2),
        (auditor_id, "auditor", "export", {}, 2),
    ]  # fmt: skip
    assert [(e["role"], e["action"], e["parameters"], e["records"]) for e in entries[4:]] == [
        ("admin", "export", {"format": "csv"}, 5)
    ]
    assert [e["seq"] for e in entries] == sorted(e["seq"] for e in entries)
    with deployment.raw("a_auditor") as auditor:
        assert auditor.get("/v1/access-log", params={"verify": "true"}).json()["problems"] == []
    with deployment.raw("a_agent") as agent:
        assert agent.get("/v1/access-log").status_code == 403
    done = run_cli(deployment.server.env, "access-log", "--verify", "--limit", "100000")
    assert done.returncode == 0, done.stderr
    assert f"{auditor_id}  auditor  export  {session_key!r}" in done.stdout
    assert "the access log's chain is intact" in done.stderr


def test_audit_search_across_sessions_over_http_and_the_cli(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.client("a_agent") as agent:
        for n in range(3):
            agent.put(f"{session_key}/{n}", {"role": "user", "content": "hi"})
        agent.reset(f"{session_key}/1")
    agent_id = f"key:{deployment.key_ids['a_agent']}"
    found, cursor = [], None
    with deployment.raw("a_auditor") as auditor:
        while True:
            params = {"actor": agent_id, "prefix": session_key, "limit": 2}
            if cursor:
                params["cursor"] = cursor
            page = auditor.get("/v1/events", params=params).json()
            found += page["events"]
            if not (cursor := page["next_cursor"]):
                break
        query = {"type": "HistoryCleared", "prefix": session_key}
        resets = auditor.get("/v1/events", params=query).json()["events"]
        assert auditor.get("/v1/events").json()["error"]["code"] == "invalid_input"
    with deployment.raw("a_agent") as agent:
        assert agent.get("/v1/events", params={"actor": agent_id}).status_code == 403
    assert sorted((e["key"], e["version"]) for e in found) == sorted(
        [(f"{session_key}/{n}", v) for n in range(3) for v in (1, 2)] + [(f"{session_key}/1", 3)]
    )
    assert [(e["key"], e["event_type"], e["actor"]) for e in resets] == [
        (f"{session_key}/1", "HistoryCleared", agent_id)
    ]
    searches = entries_of(deployment, None, prefix=session_key)
    assert [(e["action"], e["records"]) for e in searches] == [
        ("search", n) for n in (2, 2, 2, 1, 1)
    ]
    done = run_cli(deployment.server.env, "events", "--actor", agent_id, "--prefix", session_key)
    assert done.returncode == 0, done.stderr
    assert done.stdout.count(f"by {agent_id}") == 7
