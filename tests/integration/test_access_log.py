"""The access log is append-only and hash-chained per tenant: appends racing from many
threads never fork it, and an edited, deleted or reordered entry is named. Reading it is
itself entered, and a reader paging it reaches its end."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings
from session_ledger.projections.access_log import access_entries, record_access, verify_access_log
from session_ledger.projections.views import SQLViews
from tests.conftest import make_ledger

from .tampering import Database


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_racing_appends_keep_one_chain_and_tampering_is_named(
    own_store_settings: Settings, tmp_path: Path
) -> None:
    ledger = make_ledger(own_store_settings)
    try:
        views = ledger.views
        assert isinstance(views, SQLViews)
        tenant, other = own_store_settings.default_tenant, "other"

        def read(n: int) -> None:
            record_access(views, tenant if n % 3 else other, f"key:{n}", "auditor", "window",
                          f"s{n}", {"token_limit": str(n)}, n)  # fmt: skip

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(read, range(60)))
        entries = access_entries(views, tenant, 0, 1000)
        assert [e.seq for e in entries] == list(range(1, 41))
        assert sorted(e.records for e in entries) == [n for n in range(60) if n % 3]
        assert len(access_entries(views, other, 0, 1000)) == 20
        assert list(verify_access_log(views, tenant)) == []

        db = Database(own_store_settings)
        try:
            db.run("UPDATE ledger_access_log SET records = 999 WHERE tenant = ? AND seq = 7",
                   tenant)  # fmt: skip
            problems = list(verify_access_log(views, tenant))
            assert len(problems) == 1 and problems[0].startswith("entry 7: the stored hash is")
            db.run("DELETE FROM ledger_access_log WHERE tenant = ? AND seq = 7", tenant)
            assert list(verify_access_log(views, tenant)) == ["entry 7 is missing"]
            assert list(verify_access_log(views, other)) == []
        finally:
            db.close()
    finally:
        ledger.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("limit", [1, 2, 1000])
def test_each_read_of_the_log_is_entered_and_paging_it_ends(
    own_store_settings: Settings, limit: int
) -> None:
    ledger = make_ledger(own_store_settings)
    try:
        views = ledger.views
        assert isinstance(views, SQLViews)
        tenant = own_store_settings.default_tenant
        for n in range(3):
            record_access(views, tenant, "key:agent", "agent", "window", f"s{n}", {}, 1)
        keys = MemoryKeyStore()
        record, secret = keys.create(tenant, "auditor")
        app = create_app(own_store_settings, ledger=ledger, key_store=keys)
        seen: list[dict[str, Any]] = []
        pages: list[tuple[int, int]] = []  # (after, entries) of each page read
        after: int | None = 0
        with TestClient(app, headers={"Authorization": f"Bearer {secret}"}) as http:
            while after is not None:
                assert len(pages) < 10, "paging the access log never reached its end"
                query = {"after": after, "limit": limit, "verify": "true", "x": "made up"}
                answer = http.get("/v1/access-log", params=query)
                assert answer.status_code == 200, answer.text
                page = answer.json()
                assert page["problems"] == []
                seen += page["entries"]
                pages.append((after, len(page["entries"])))
                after = page["next_after"]
        assert [e["seq"] for e in seen] == list(range(1, len(seen) + 1))
        assert [e["action"] for e in seen[:3]] == ["window"] * 3
        # each read entered once, after its page, with its parsed inputs and its count
        reads = access_entries(views, tenant, 3, 1000)
        assert [(e.actor, e.role, e.action, e.session_key, e.parameters, e.records)
                for e in reads] == [
            (f"key:{record.id}", "auditor", "access log", None,
             {"after": at, "limit": limit, "verify": True}, count)
            for at, count in pages
        ]  # fmt: skip
        assert list(verify_access_log(views, tenant)) == []
    finally:
        ledger.close()


def test_every_content_read_counts_its_records_without_being_parsed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The access log's count of what a read returned comes from the answer itself
    (`X-Ledger-Records`): a read of over 1 MiB of messages, sent in chunks, was entered
    with 0 records, and a large answer was parsed again on the event loop to count them."""
    from session_ledger.api import access_logging
    from tests.conftest import make_settings

    keys = MemoryKeyStore()
    tenant = "t-counted"
    agent, auditor = (keys.create(tenant, role)[1] for role in ("agent", "auditor"))
    settings = make_settings("sqlite", tmp_path)
    make_ledger(settings).close()
    big = "x" * 600_000  # two of them: over the 1 MiB from which messages are streamed
    with TestClient(create_app(settings, key_store=keys)) as client:
        as_agent = {"Authorization": f"Bearer {agent}"}
        messages = [{"role": "user", "content": f"{big} {i}"} for i in range(2)]
        assert client.post("/v1/sessions/s/messages", json={"messages": messages},
                           headers=as_agent).status_code == 200  # fmt: skip
        small = {"messages": [{"role": "assistant", "content": "ok"}]}
        assert client.post("/v1/sessions/s/messages", json=small, headers=as_agent).is_success

        def not_parsed(body: Any) -> int:
            raise AssertionError("an answer was parsed again to count its records")

        monkeypatch.setattr(access_logging, "records_in", not_parsed)
        client.headers["Authorization"] = f"Bearer {auditor}"
        reads = {
            "transcript": ("/v1/sessions/s/messages", {}, 3),
            "window": ("/v1/sessions/s/context", {"token_limit": 10**7}, 3),
            "audit": ("/v1/sessions/s/events", {}, 3),
            "replay": ("/v1/sessions/s/replay", {"token_limit": 10**7, "as_of_version": 2}, 2),
            "diff": ("/v1/sessions/s/diff", {"from_version": 2, "to_version": 3}, 1),
        }
        for path, params, records in reads.values():
            answer = client.get(path, params=params)
            assert answer.status_code == 200, answer.text
            assert answer.headers["X-Ledger-Records"] == str(records)
        monkeypatch.undo()
        entries = client.get("/v1/access-log", params={"limit": 1000}).json()["entries"]
    counts = {e["action"]: e["records"] for e in entries if e["session_key"] == "s"}
    assert counts == {action: records for action, (_, _, records) in reads.items()}


def test_an_export_counts_its_event_lines_not_the_words_inside_them(tmp_path: Path) -> None:
    """A streamed export is counted as it is sent: its event lines, however the chunks
    cut them. A message holding the text an event line begins with (`{"record":"event"`)
    counted as more events."""
    from tests.conftest import make_settings

    keys = MemoryKeyStore()
    agent, auditor = (keys.create("t-lines", role)[1] for role in ("agent", "auditor"))
    settings = make_settings("sqlite", tmp_path)
    make_ledger(settings).close()
    lookalike = {"record": "event", "x": {"record": "event"}}
    message = {"role": "user", "content": "hi", "additional_kwargs": lookalike}
    with TestClient(create_app(settings, key_store=keys)) as client:
        for _ in range(2):
            written = client.post("/v1/sessions/mk/messages", json={"messages": [message]},
                                  headers={"Authorization": f"Bearer {agent}"})  # fmt: skip
            assert written.status_code == 200, written.text
        client.headers["Authorization"] = f"Bearer {auditor}"
        assert client.get("/v1/sessions/mk/export").status_code == 200
        assert client.get("/v1/package", params={"prefix": "mk"}).status_code == 200
        entries = client.get("/v1/access-log", params={"limit": 1000}).json()["entries"]
    # (the session's 3 events: its start and the two appends)
    assert [(e["action"], e["records"]) for e in entries] == [("export", 3), ("export", 3)]


def test_event_lines_are_counted_across_any_cut_of_the_chunks() -> None:
    import asyncio

    from session_ledger.api.access_logging import _counted

    body = b'{"record":"header"}\n' + b'{"record":"event","payload":{"record":"event"}}\n' * 3

    async def chunks(size: int) -> Any:
        for at in range(0, len(body), size):
            yield body[at : at + size]

    async def count(size: int) -> list[int]:
        recorded: list[int] = []
        async for _ in _counted(chunks(size), lambda n, done: recorded.append(n), csv=False):
            pass
        return recorded

    for size in range(1, len(body) + 1):
        assert asyncio.run(count(size)) == [3], size


def test_a_removal_that_answers_the_message_removed_is_logged_as_a_read() -> None:
    """A removal's answer holds the message removed; a retry under its Idempotency-Key
    answers it again, with no new event. Each such answer to an admin is entered."""
    from tests.memory_api import memory_api

    with memory_api(tenant="t-removed") as api:
        body = {"messages": [{"role": "user", "content": f"m{i}"} for i in range(3)]}
        assert api.client.post("/v1/sessions/s/messages", json=body).status_code == 200
        retried = {"Idempotency-Key": "pop-1"}
        for _ in range(2):  # (the second: a retry, answered from the stored write)
            answer = api.client.delete("/v1/sessions/s/messages/last", headers=retried)
            assert answer.status_code == 200 and answer.json()["removed"][0]["blocks"]
        assert api.client.delete("/v1/sessions/s/messages/0").status_code == 200
        _, agent = api.keys.create("t-removed", "agent")
        agents = api.client.delete("/v1/sessions/s/messages/0", headers=api.bearer(agent))
        assert agents.status_code == 200  # (an agent's reads are not entered by default)
        entries = api.client.get("/v1/access-log", params={"limit": 100}).json()["entries"]
    retried_as = {"idempotency_key": "pop-1"}
    assert [(e["action"], e["session_key"], e["records"], e["parameters"]) for e in entries] == [
        ("removed", "s", 1, retried_as),
        ("removed", "s", 1, retried_as),
        ("removed", "s", 1, {"index": 0}),
    ]
