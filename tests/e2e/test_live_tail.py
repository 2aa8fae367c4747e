"""Live tails (Server-Sent Events) on real servers: every event of a session in order as
it commits, chunks included; resumed from Last-Event-ID with no gap and no duplicate;
across two API processes on one PostgreSQL; heartbeats when idle."""

from __future__ import annotations

from urllib.parse import quote

import httpx
import pytest

from session_ledger.api.client import LedgerClient
from tests.conftest import fresh_postgres_database

from .conftest import Deployment, Server, run_cli, server_env
from .sse import Tail


def live(key: str) -> str:
    return f"/v1/sessions/{quote(key, safe='')}/events/live"


def write_turn(api: httpx.Client, key: str, n: int) -> int:
    """A user message and a streamed answer: 5 events (4 when the session exists)."""
    k = quote(key, safe="")
    api.post(
        f"/v1/sessions/{k}/messages", json={"messages": [{"role": "user", "content": f"q{n}"}]}
    )
    sid = api.post(f"/v1/sessions/{k}/streams", json={}).json()["stream_id"]
    api.post(f"/v1/sessions/{k}/streams/{sid}/chunks", json={"deltas": [f"a{n} "]})
    done = api.post(f"/v1/sessions/{k}/streams/{sid}/complete", json={"deltas": ["end"]})
    assert done.status_code == 200, done.text
    return int(done.json()["version"])


def test_a_tail_sees_every_event_in_order_and_resumes(
    deployment: Deployment, session_key: str
) -> None:
    with deployment.raw("a_agent") as api:
        write_turn(api, session_key, 0)  # versions 1-5, before the tail opens
        tail = Tail(deployment.base_url, live(session_key), deployment.keys["a_auditor"])
        try:
            head = tail.events(5)
            assert [m.id for m in head] == ["1", "2", "3", "4", "5"]
            assert [m.event for m in head][2:] == [
                "StreamStarted",
                "StreamChunksAppended",
                "StreamCompleted",
            ]
            write_turn(api, session_key, 1)  # 6-9, as they commit
            more = tail.events(4)
            assert [m.id for m in more] == ["6", "7", "8", "9"]
            assert more[2].data is not None and more[2].data["changes"]["deltas"] == ["a1 "]
        finally:
            tail.close()
        write_turn(api, session_key, 2)  # 10-13, while nobody listens
        resumed = Tail(
            deployment.base_url, live(session_key), deployment.keys["a_auditor"], last_event_id="9"
        )
        try:
            assert [m.id for m in resumed.events(4)] == ["10", "11", "12", "13"]
            assert resumed.comments(1.0) == []  # nothing more: no duplicate
        finally:
            resumed.close()


def test_a_tail_of_a_missing_session_is_404(deployment: Deployment) -> None:
    with deployment.raw("a_auditor") as api:
        assert api.get(live("no such session")).status_code == 404
        bad = api.get(live("x"), headers={"Last-Event-ID": "yesterday"})
        assert bad.status_code in (404, 422)


@pytest.mark.postgres
def test_two_processes_on_postgres_deliver_and_resume_without_gap_or_duplicate() -> None:
    with fresh_postgres_database("ledger_live") as database:
        writer = Server(server_env(database, LEDGER_TAIL_HEARTBEAT_SECONDS="0.5")).start()
        reader = Server(server_env(database, LEDGER_TAIL_HEARTBEAT_SECONDS="0.5")).start()
        try:
            created = run_cli(writer.env, "keys", "create", "--role", "agent")
            key = created.stdout.split("key: ")[1].strip()
            session = "two/processes"
            with LedgerClient(writer.base_url, key) as client:
                client.put(session, {"role": "user", "content": "first"})  # versions 1-2
            tail = Tail(reader.base_url, live(session), key)
            seen = [m.id for m in tail.events(2)]
            with httpx.Client(
                base_url=writer.base_url, timeout=60, headers={"Authorization": f"Bearer {key}"}
            ) as api:
                last = 2
                for n in range(5):
                    last = write_turn(api, session, n)  # written by the other process
                    seen += [m.id for m in tail.events(4)]
                heartbeats = tail.comments(1.5)
                tail.close()
                assert seen == [str(v) for v in range(1, last + 1)]
                assert "heartbeat" in heartbeats
                for n in range(5, 8):
                    last = write_turn(api, session, n)
            resumed = Tail(writer.base_url, live(session), key, last_event_id=seen[-1])
            rest = [m.id for m in resumed.events(last - int(seen[-1]))]
            resumed.close()
        except Exception as exc:
            logs = writer.stop() + reader.stop()
            raise AssertionError(f"{exc}\nserver output:\n{logs[-20_000:]}") from exc
        finally:
            writer.stop()
            reader.stop()
    assert rest == [str(v) for v in range(int(seen[-1]) + 1, last + 1)]
