"""The tenant-wide live tail (`GET /v1/events/live`) on real servers: every event of the
caller's tenant across sessions as it commits, only the caller's tenant, resumed from
Last-Event-ID with no gap and no duplicate; across two API processes on PostgreSQL."""

from __future__ import annotations

import contextlib
import secrets
import time
import uuid
from pathlib import Path
from urllib.parse import quote

import httpx
import pytest

from session_ledger.api.client import LedgerClient
from session_ledger.api.feed_cursors import FeedCursors
from tests.conftest import fresh_postgres_database

from .conftest import Deployment, Server, run_cli, server_env
from .sse import Message, Tail
from .test_access_log import entries_of
from .test_live_tail import limited, new_key  # noqa: F401 - `limited`: a fixture

LIVE = "/v1/events/live"


def put(api: httpx.Client, key: str, content: str) -> None:
    done = api.post(
        f"/v1/sessions/{quote(key, safe='')}/messages",
        json={"messages": [{"role": "user", "content": content}]},
    )
    assert done.status_code in (200, 201), done.text


def keyed(messages: list[Message]) -> list[tuple[str, int, str]]:
    return [(m.data["key"], m.data["version"], str(m.event)) for m in messages if m.data]


def test_a_tenant_tail_sees_its_sessions_in_order_and_resumes(deployment: Deployment) -> None:
    prefix = f"feed-{uuid.uuid4().hex[:8]}/"
    x, y = f"{prefix}x", f"{prefix}ü y"
    path = f"{LIVE}?prefix={quote(prefix)}"
    tail = Tail(deployment.base_url, path, deployment.keys["a_auditor"])
    with deployment.raw("a_agent") as a, deployment.raw("b_agent") as b:
        try:
            put(a, x, "1")
            put(b, x, "another tenant's")
            put(a, y, "2")
            put(a, f"other-{prefix}", "outside the prefix")
            put(a, x, "3")
            got = tail.events(5)
            assert keyed(got) == [
                (x, 1, "SessionStarted"), (x, 2, "MessagesAppended"),
                (y, 1, "SessionStarted"), (y, 2, "MessagesAppended"), (x, 3, "MessagesAppended"),
            ]  # fmt: skip
            assert got[1].data is not None
            assert got[1].data["changes"]["added"][0]["blocks"][0]["text"] == "1"
            assert len({m.id for m in got}) == 5
        finally:
            tail.close()
        put(a, y, "4")  # while nobody listens
        put(b, y, "another tenant's")
        put(a, x, "5")
        resumed = Tail(deployment.base_url, path, deployment.keys["a_auditor"], got[-1].id)
        try:
            assert keyed(resumed.events(2)) == [(y, 3, "MessagesAppended"),
                                                (x, 4, "MessagesAppended")]  # fmt: skip
            assert [c for c in resumed.comments(1.0) if c != "id"] == []  # nothing twice
        finally:
            resumed.close()
    # each tail is in the access log once, as it opened, with its own parameters
    logged = entries_of(deployment, None, prefix=prefix)
    auditor = f"key:{deployment.key_ids['a_auditor']}"
    assert [(e["actor"], e["action"], e["parameters"], e["records"]) for e in logged] == [
        (auditor, "live tail", {"prefix": prefix}, 0),
        (auditor, "live tail", {"prefix": prefix, "after": got[-1].id}, 0),
    ]  # fmt: skip


def test_a_tenant_tails_ids_are_opaque_cursors_of_its_own_tenant(
    limited: Server,  # noqa: F811 - the fixture imported above
) -> None:
    """The ids tell nothing of other tenants' writes: never the feed's positions (which
    count every tenant's events), never alike twice, the heartbeats' too; good for the
    tenant they were sent to only; the positions sent before cursors are refused (400),
    as is any other id."""
    _, a_agent = new_key(limited, "agent", "a")
    _, a_auditor = new_key(limited, "auditor", "a")
    _, b_agent = new_key(limited, "agent", "b")
    _, b_admin = new_key(limited, "admin", "b")
    tail = Tail(limited.base_url, LIVE, a_auditor)
    with LedgerClient(limited.base_url, a_agent) as a, LedgerClient(limited.base_url, b_agent) as b:
        try:
            a.put("x", {"role": "user", "content": "1"})
            for n in range(5):
                b.put("x", {"role": "user", "content": f"another tenant's {n}"})
            a.put("x", {"role": "user", "content": "2"})
            got = tail.events(3)
            heartbeats = [m.id for m in _ids(tail, 2)]
        finally:
            tail.close()
    ids = [m.id or "" for m in got] + [h or "" for h in heartbeats]
    assert len(set(ids)) == len(ids)  # every id unique, the heartbeats' too
    assert not any(i.replace(".", "").isdigit() for i in ids), ids
    with httpx.Client(base_url=limited.base_url, timeout=60) as api:
        for key, cursor in ((b_admin, ids[2]), (a_auditor, "123"), (a_auditor, "12.3"),
                            (a_auditor, ids[2][:-3]), (a_auditor, "9" * 32)):  # fmt: skip
            refused = api.get(LIVE, headers={"Last-Event-ID": cursor,
                                             "Authorization": f"Bearer {key}"})  # fmt: skip
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["code"] == "invalid_last_event_id"
        after = api.get(
            LIVE, params={"after": "123"}, headers={"Authorization": f"Bearer {a_auditor}"}
        )
        assert after.status_code == 422
    resumed = Tail(limited.base_url, LIVE, a_auditor, last_event_id=ids[1])
    try:
        assert [m.data["version"] for m in resumed.events(1) if m.data] == [3]
    finally:
        resumed.close()


def _ids(tail: Tail, n: int) -> list[Message]:
    """The next `n` id lines of heartbeats (events fail the test)."""
    found: list[Message] = []
    deadline = time.monotonic() + 30
    while len(found) < n:
        assert time.monotonic() < deadline, found
        message = tail.messages.get(timeout=30)
        assert message.data is None, message
        if message.comment == "id":
            found.append(message)
    return found


def test_a_tenant_tail_is_for_auditors_and_admins_and_refuses_a_foreign_position(
    deployment: Deployment,
) -> None:
    with deployment.raw("a_agent") as api:
        assert api.get(LIVE).status_code == 403
    with deployment.raw("a_auditor") as api:
        bad = api.get(LIVE, headers={"Last-Event-ID": "yesterday"})
        assert bad.status_code == 400, bad.text
        assert "position" in bad.text
        assert api.get(LIVE, params={"after": "9" * 19}).status_code == 422


@pytest.mark.postgres
def test_two_processes_on_postgres_tail_a_tenant_without_gap_or_duplicate() -> None:
    with fresh_postgres_database("ledger_feed") as database:
        env = {"LEDGER_TAIL_HEARTBEAT_SECONDS": "0.5"}
        writer = Server(server_env(database, **env)).start()
        reader = Server(server_env(database, **env)).start()
        try:
            created = run_cli(writer.env, "keys", "create", "--role", "admin")
            key = created.stdout.split("key: ")[1].strip()
            auth = {"Authorization": f"Bearer {key}"}
            tail = Tail(reader.base_url, LIVE, key)
            seen: list[Message] = []
            with httpx.Client(base_url=writer.base_url, timeout=60, headers=auth) as api:
                for n in range(6):
                    put(api, f"s{n % 3}", str(n))  # written by the other process
                seen += tail.events(9)  # 3 sessions started, 6 appends
                tail.close()
                for n in range(6, 9):
                    put(api, f"s{n % 3}", str(n))
            resumed = Tail(writer.base_url, LIVE, key, last_event_id=seen[-1].id)
            rest = resumed.events(3)
            assert [c for c in resumed.comments(1.5) if c not in ("id", "heartbeat")] == []
            resumed.close()
        except Exception as exc:
            logs = writer.stop() + reader.stop()
            raise AssertionError(f"{exc}\nserver output:\n{logs[-20_000:]}") from exc
        finally:
            writer.stop()
            reader.stop()
    versions: dict[str, list[int]] = {}
    for key_, version, _ in keyed(seen + rest):
        versions.setdefault(key_, []).append(version)
    assert versions == {"s0": [1, 2, 3, 4], "s1": [1, 2, 3, 4], "s2": [1, 2, 3, 4]}


@pytest.mark.parametrize("store", ["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def test_the_servers_of_a_store_share_its_cursor_secret_and_no_url_opens_one(
    store: str, tmp_path: Path
) -> None:
    """Without LEDGER_FEED_CURSOR_KEY the servers of one store seal with the random secret
    the store keeps: a cursor of one resumes at the other, whichever URL each names the
    store by (a symlinked folder, a connection parameter), and a cursor sealed with a key
    derived from either URL (the default before) is refused."""
    with contextlib.ExitStack() as stack:
        if store == "sqlite":
            (tmp_path / "data").mkdir()
            (tmp_path / "mount").symlink_to(tmp_path / "data")
            urls = [f"sqlite:///{tmp_path / folder / 'ledger.db'}" for folder in ("data", "mount")]
            start = "0"
        else:
            url = stack.enter_context(fresh_postgres_database("ledger_cursors"))
            urls, start = [url, f"{url}?application_name=second"], "0.0"
        admin = "sl_test_" + secrets.token_urlsafe(24)
        first = Server(server_env(urls[0], LEDGER_BOOTSTRAP_KEY=admin)).start()
        stack.callback(first.stop)
        second = Server(server_env(urls[1])).start()
        stack.callback(second.stop)
        auth = {"Authorization": f"Bearer {admin}"}
        tail = Tail(first.base_url, LIVE, admin)
        with httpx.Client(base_url=first.base_url, timeout=60, headers=auth) as api:
            try:
                put(api, "s", "1")
                got = tail.events(2)
            finally:
                tail.close()
            put(api, "s", "2")
        resumed = Tail(second.base_url, LIVE, admin, last_event_id=got[-1].id)
        try:
            assert resumed.response.status_code == 200
            assert keyed(resumed.events(1)) == [("s", 3, "MessagesAppended")]
        finally:
            resumed.close()
        with httpx.Client(timeout=60, headers=auth) as api:
            for server in (first, second):
                for url in urls:
                    forged = FeedCursors(url).seal("default", start)
                    with api.stream("GET", f"{server.base_url}{LIVE}",
                                    headers={"Last-Event-ID": forged}) as refused:  # fmt: skip
                        assert refused.status_code == 400, (server.base_url, url)
