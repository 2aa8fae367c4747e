"""Reads and exports leave a trace: an auditor's reads and every export appear in the
tenant's access log with the right actor, what was read and how many records; agents'
own reads do not (by default); and the log's own chain verifies."""

from __future__ import annotations

import contextlib
import secrets
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import httpx
import pytest

from session_ledger.api.app import create_app
from session_ledger.api.client import LedgerClient
from session_ledger.api.settings import Settings
from session_ledger.projections.checkpoint import generate_keys
from tests.conftest import fresh_postgres_database

from .conftest import Deployment, Server, run_cli, server_env


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
        # a query key no route declares is not stored; the route's own, as parsed
        made_up = {"note": "anything"}
        assert auditor.get(f"{path}/messages", params={"limit": 3, **made_up}).status_code == 200
        assert auditor.get(f"{path}/context", params={"token_limit": 1000}).status_code == 200
        assert auditor.get(f"{path}/events").status_code == 200
        assert auditor.get(f"{path}/export").status_code == 200
    with deployment.raw("a_admin") as admin:
        assert admin.get(f"{path}/export", params={"format": "csv"}).status_code == 200
    entries = entries_of(deployment, session_key)
    auditor_id = f"key:{deployment.key_ids['a_auditor']}"
    assert [(e["actor"], e["role"], e["action"], e["parameters"], e["records"])
            for e in entries[:4]] == [
        (auditor_id, "auditor", "transcript", {"limit": 3}, 3),
        (auditor_id, "auditor", "window", {"token_limit": 1000}, 5),
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


# The walk: every route of the OpenAPI document that answers a session's content or the
# evidence about it, called as each role; each answer to an auditor or an admin must have
# appended exactly one access-log entry, with the route's own inputs as parsed.
DOCUMENT = create_app(Settings(database_url="memory://")).openapi()
OPERATIONS = sorted((method, path) for path, operations in DOCUMENT["paths"].items()
                    for method in operations)  # fmt: skip
# Routes that answer no session content and no evidence: probes, metrics, the API keys.
NO_CONTENT = {("get", "/healthz"), ("get", "/readyz"), ("get", "/metrics"), ("get", "/v1/keys")}
# Writes: each is an event in its session's audit trail naming the key that made it (or
# a record of the key table); what they answer is the write's own result.
WRITES = {
    ("post", "/v1/sessions/{key}/messages"), ("put", "/v1/sessions/{key}/messages"),
    ("delete", "/v1/sessions/{key}/messages"), ("delete", "/v1/sessions/{key}/messages/last"),
    ("delete", "/v1/sessions/{key}/messages/{index}"), ("post", "/v1/sessions/{key}/archive"),
    ("post", "/v1/sessions/{key}/streams"),
    ("post", "/v1/sessions/{key}/streams/{stream_id}/chunks"),
    ("post", "/v1/sessions/{key}/streams/{stream_id}/complete"),
    ("post", "/v1/sessions/{key}/streams/{stream_id}/abort"),
    ("post", "/v1/sessions/{key}/erase"), ("delete", "/v1/sessions/{key}"),
    ("post", "/v1/sessions/{key}/hold"), ("post", "/v1/sessions/{key}/hold/release"),
    ("post", "/v1/keys"), ("delete", "/v1/keys/{key_id}"),
}  # fmt: skip
CONTENT = [op for op in OPERATIONS if op not in NO_CONTENT | WRITES]  # a new route: walked
TAILS = {("get", "/v1/sessions/{key}/events/live"), ("get", "/v1/events/live")}
# Values of the inputs a route requires, by name; and what a route needs beyond them.
REQUIRED = {"from_version": 1, "to_version": 3}
NEEDS: dict[tuple[str, str], dict[str, Any]] = {("get", "/v1/events"): {"type": "MessagesAppended"}}
PLANTED = {"planted": "made-up"}  # a query parameter no route declares: never stored
STREAM_ID = "walk-stream"
QUIET_SECONDS = 1.0  # after a tail closed, how long no further entry may come
ROLES = ("agent", "auditor", "admin")


@dataclass
class Walked:
    """A server with one session holding content (versions 1 to 3, a stream, a
    checkpoint), a key of each role, and a watcher key that reads the access log."""

    base_url: str
    keys: dict[str, str]
    actors: dict[str, str]
    session_key: str
    agent_reads_logged: bool

    def raw(self, role: str) -> httpx.Client:
        headers = {"Authorization": f"Bearer {self.keys[role]}"}
        return httpx.Client(base_url=self.base_url, headers=headers, timeout=60)


@pytest.fixture(
    scope="module",
    params=[("sqlite", False), pytest.param(("postgres", False), marks=pytest.mark.postgres),
            ("sqlite", True)],
    ids=["sqlite", "postgres", "sqlite-agent-reads"],
)  # fmt: skip
def walked(
    request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Walked]:
    store, agent_reads = request.param
    folder = tmp_path_factory.mktemp("walk")
    with contextlib.ExitStack() as stack:
        url = (f"sqlite:///{folder / 'ledger.db'}" if store == "sqlite"
               else stack.enter_context(fresh_postgres_database("ledger_walk")))  # fmt: skip
        generate_keys(folder / "signing.pem", folder / "public.pem")
        admin_key = "sl_test_" + secrets.token_urlsafe(24)
        server = Server(server_env(
            url, LEDGER_BOOTSTRAP_KEY=admin_key, LEDGER_LOG_AGENT_READS=str(agent_reads).lower(),
            LEDGER_SIGNING_KEY_FILE=str(folder / "signing.pem"),
            LEDGER_CHECKPOINT_DIR=str(folder / "checkpoints"),
        )).start()  # fmt: skip
        stack.callback(server.stop)
        keys, actors = {"admin": admin_key}, {}
        with LedgerClient(server.base_url, admin_key) as admin:
            for role, name in (("agent", "agent"), ("auditor", "auditor"), ("auditor", "watcher")):
                created = admin.create_key(role, name=name)
                keys[name], actors[name] = created.key, f"key:{created.id}"
            actors["admin"] = next(f"key:{k.id}" for k in admin.list_keys() if k.role == "admin")
        walked = Walked(server.base_url, keys, actors, f"walk/{uuid.uuid4().hex[:8]} ü",
                        agent_reads)  # fmt: skip
        key = walked.session_key
        with LedgerClient(server.base_url, keys["agent"]) as agent:
            agent.put_messages(key, [{"role": "user", "content": "a secret"},
                                     {"role": "assistant", "content": "kept"}])  # fmt: skip
            agent.put(key, {"role": "user", "content": "another"})
            agent.set(key, [{"role": "user", "content": "replaced"}])
        path = f"/v1/sessions/{quote(key, safe='')}/streams"
        with walked.raw("agent") as http:
            assert http.post(path, json={"stream_id": STREAM_ID}).status_code == 201
            chunks = http.post(f"{path}/{STREAM_ID}/chunks", json={"deltas": ["streamed text"]})
            assert chunks.status_code == 200, chunks.text
        done = run_cli(server.env, "checkpoint")
        assert done.returncode == 0, done.stderr
        yield walked


class LogWatch:
    """The entries appended since the last look, read over HTTP by the watcher (whose own
    reads are entered too, and left out here)."""

    def __init__(self, walked: Walked) -> None:
        self.http = walked.raw("watcher")
        self.watcher = walked.actors["watcher"]
        self.after = 0
        self.new()

    def new(self) -> list[dict[str, Any]]:
        found: list[dict[str, Any]] = []
        while True:
            answer = self.http.get("/v1/access-log", params={"after": self.after, "limit": 1000})
            assert answer.status_code == 200, answer.text
            page = answer.json()
            found += page["entries"]
            self.after = found[-1]["seq"] if found else self.after
            if page["next_after"] is None:
                return [e for e in found if e["actor"] != self.watcher]

    def quiet(self, seconds: float) -> list[dict[str, Any]]:
        """What was appended within `seconds` from now."""
        found, deadline = [], time.monotonic() + seconds
        while time.monotonic() < deadline:
            found += self.new()
            time.sleep(0.1)
        return found + self.new()

    def first(self, seconds: float) -> list[dict[str, Any]]:
        """What was appended, waiting up to `seconds` for a first entry."""
        deadline = time.monotonic() + seconds
        while not (found := self.new()) and time.monotonic() < deadline:
            time.sleep(0.1)
        return found


def _request(walked: Walked, method: str, path: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    """The URL of the route on the walked session, the query to send, and the parameters
    its entry must hold: the route's own inputs, typed as it parsed them."""
    values = {"key": quote(walked.session_key, safe=""), "stream_id": STREAM_ID}
    names = {p["name"]: p for p in DOCUMENT["paths"][path][method].get("parameters", [])}
    unknown = [n for n, p in names.items() if p["required"] and n not in values | REQUIRED]
    assert not unknown, f"give the walk a value for {unknown} of {method.upper()} {path}"
    url = path.format(**{n: values[n] for n, p in names.items() if p["in"] == "path"})
    query = {n: REQUIRED[n] for n, p in names.items() if p["in"] == "query" and p["required"]}
    query |= NEEDS.get((method, path), {})
    expected = query | {n: values[n] for n, p in names.items()
                        if p["in"] == "path" and n != "key"}  # fmt: skip
    return url, query | PLANTED, expected


def test_the_routes_without_content_and_the_writes_are_routes_of_the_document() -> None:
    assert (NO_CONTENT | WRITES) - set(OPERATIONS) == set()  # no route listed that is gone
    assert TAILS - set(CONTENT) == set()
    assert all(method == "get" for method, _ in NO_CONTENT) and not NO_CONTENT & WRITES


@pytest.mark.parametrize(("method", "path"), CONTENT)
def test_every_content_route_is_access_logged(walked: Walked, method: str, path: str) -> None:
    url, query, expected = _request(walked, method, path)
    watch = LogWatch(walked)
    for role in ROLES:
        with walked.raw(role) as http:
            if (method, path) in TAILS:
                with http.stream(method, url, params=query) as answer:
                    status = answer.status_code
                    if status == 200:
                        next(answer.iter_raw())  # the tail is open
                        opened = watch.first(10) if _logged(walked, role) else watch.quiet(0.5)
                entries = opened + watch.quiet(QUIET_SECONDS) if status == 200 else watch.new()
            else:
                answer = http.request(method, url, params=query)
                status = answer.status_code
                entries = watch.new()
        if role != "agent":
            assert status == 200, f"{role}: {answer.status_code}, give the walk valid inputs"
        assert status in (200, 403), f"{role}: {status}"
        want = 1 if status == 200 and _logged(walked, role) else 0
        assert len(entries) == want, f"{role} {method.upper()} {path}: {entries}"
        for entry in entries:
            assert (entry["actor"], entry["role"]) == (walked.actors[role], role)
            key = walked.session_key if "{key}" in path else None
            assert entry["session_key"] == key
            assert "planted" not in entry["parameters"]
            if (method, path) not in TAILS:
                assert entry["parameters"] == expected


def _logged(walked: Walked, role: str) -> bool:
    return role != "agent" or walked.agent_reads_logged


def test_a_paths_inputs_are_entered_as_their_route_took_them(
    deployment: Deployment, session_key: str
) -> None:
    """A stream's id percent-decoded, however its path spelt it; a removal's index a
    number (`+0`, `00`: index 0), so a search of the log finds each under one spelling."""
    path = f"/v1/sessions/{quote(session_key, safe='')}"
    with deployment.raw("a_admin") as admin:
        opened = admin.post(f"{path}/streams", json={"stream_id": "a/b%c é"})
        assert opened.status_code == 201, opened.text
        for spelt in ("a%2Fb%25c%20%C3%A9", "a%2fb%25c%20%c3%a9"):
            assert admin.get(f"{path}/streams/{spelt}").status_code == 200
        admin.post(f"{path}/messages", json={"messages": [{"role": "user", "content": "x"}] * 3})
        for index in ("+0", "00", "-1"):
            assert admin.delete(f"{path}/messages/{index}").status_code == 200
    entries = entries_of(deployment, session_key)
    assert [(e["action"], e["parameters"]) for e in entries] == [
        ("stream", {"stream_id": "a/b%c é"}),
        ("stream", {"stream_id": "a/b%c é"}),
        ("removed", {"index": 0}),
        ("removed", {"index": 0}),
        ("removed", {"index": -1}),
    ]
