"""Reads whose answers the server bounds and encodes off the event loop: a page of the
audit trail ends before the answer bytes (over HTTP and MCP) and its `next_after` reads
on to every event exactly once; the diff refuses histories of more than
`MAX_DIFF_MESSAGES` messages, and reads each history a bounded number of pages whatever
the number of runs that differ; the replay, the audit trail and the diff are answered as
bytes made in the route's worker thread, the JSON FastAPI would have made of the model."""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import TypeAdapter

from session_ledger.api.auth import Principal
from session_ledger.api.deps import SessionCall, WindowInputs
from session_ledger.api.mcp_server.read_tools import LedgerReads
from session_ledger.api.routes import diff as diff_route
from session_ledger.api.routes.events import AuditInputs, get_audit_trail
from session_ledger.api.routes.replay import replay_session, replayed
from session_ledger.api.schemas import AuditEvent, AuditTrailAnswer, HistoryDiff, Replay
from session_ledger.domain.ledger import Ledger
from tests.memory_api import memory_api

TENANT = "acme"
PATH = "/v1/sessions/chat"
ANSWER = 4096  # max_answer_bytes of the audit tests


class Server:
    """An app on a memory store, its ledger, and a client with an admin key of TENANT."""

    def __init__(self, client: TestClient, ledger: Ledger, key_id: str) -> None:
        self.http, self.ledger = client, ledger
        self.who = Principal(key_id, TENANT, "admin")

    def put(self, *texts: str, path: str = PATH) -> int:
        body = {"messages": [{"role": "user", "content": t} for t in texts]}
        answer = self.http.post(f"{path}/messages", json=body)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["version"])

    def set(self, *texts: str, path: str = PATH) -> int:
        body = {"messages": [{"role": "user", "content": t} for t in texts]}
        answer = self.http.put(f"{path}/messages", json=body)
        assert answer.status_code == 200, answer.text
        return int(answer.json()["version"])


def serve(**limits: Any) -> Iterator[Server]:
    with memory_api(tenant=TENANT, **limits) as api:
        yield Server(api.client, api.ledger, api.key_id)


@pytest.fixture
def small() -> Iterator[Server]:
    """Answers of at most ANSWER bytes."""
    yield from serve(max_answer_bytes=ANSWER)


@pytest.fixture
def paged() -> Iterator[Server]:
    """Pages of 100 messages: a history of 1,000 is read in 10."""
    yield from serve(max_page_messages=100)


@pytest.fixture
def server() -> Iterator[Server]:
    yield from serve()


def counted(monkeypatch: pytest.MonkeyPatch, ledger: Ledger, name: str) -> list[Any]:
    """The calls of `ledger.<name>` from now on (each call's keyword arguments)."""
    calls: list[Any] = []
    method: Callable[..., Any] = getattr(ledger, name)

    def count(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        return method(*args, **kwargs)

    monkeypatch.setattr(ledger, name, count)
    return calls


def fastapi_serializations(monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    """The answers FastAPI serializes itself (on the event loop) from now on."""
    import fastapi.routing

    made: list[Any] = []
    serialize = fastapi.routing.serialize_response

    async def record(**kwargs: Any) -> Any:
        made.append(kwargs.get("response_content"))
        return await serialize(**kwargs)

    monkeypatch.setattr(fastapi.routing, "serialize_response", record)
    return made


# The audit trail


def audit_pages(read: Callable[[int], tuple[list[Any], int | None]]) -> list[list[int]]:
    """The versions of each page, reading on with `next_after` from after 0."""
    pages, after = [], 0
    while True:
        events, following = read(after)
        pages.append([e["version"] for e in events])
        if following is None:
            return pages
        assert following == events[-1]["version"]
        after = following


def http_page(server: Server, after: int, limit: int = 1000) -> tuple[list[Any], int | None]:
    answer = server.http.get(f"{PATH}/events", params={"after": after, "limit": limit})
    assert answer.status_code == 200, answer.text
    # The body is exactly the model's JSON (what FastAPI made of it before).
    assert AuditTrailAnswer.model_validate_json(answer.content).model_dump_json().encode() == (
        answer.content
    )
    assert answer.headers["ETag"] == f'"{server.ledger.head("chat", tenant=TENANT).version}"'
    found = answer.json()
    assert sum(len(json.dumps(e, separators=(",", ":"))) for e in found["events"][1:]) <= ANSWER
    return found["events"], found["next_after"]


def mcp_page(server: Server, after: int, limit: int = 1000) -> tuple[list[Any], int | None]:
    reads = LedgerReads(server.ledger, log_agent_reads=False)
    found = reads.audit(server.who, "chat", after=after, limit=limit)
    return found["events"], found["next_after"]


@pytest.mark.parametrize("read", [http_page, mcp_page], ids=["http", "mcp"])
def test_an_audit_page_ends_before_the_answer_bytes(
    small: Server, read: Callable[..., tuple[list[Any], int | None]]
) -> None:
    small.put("a" * 1400)  # 2
    small.put("b" * 1400)  # 3
    small.put("c")  # 4
    small.put("d" * 5000)  # 5: alone, over the bytes
    small.put("e")  # 6
    first, following = read(small, 0)
    assert [e["version"] for e in first] == [1, 2, 3, 4] and following == 4
    pages = audit_pages(lambda after: read(small, after))
    assert pages == [[1, 2, 3, 4], [5], [6]]
    assert read(small, 6) == ([], None)


@pytest.mark.parametrize("read", [http_page, mcp_page], ids=["http", "mcp"])
def test_an_audit_page_counts_what_a_replace_removed(
    small: Server, read: Callable[..., tuple[list[Any], int | None]]
) -> None:
    """A replace's stored event is small but its entry lists what it removed (from the
    views): the page ends by the entries' JSON, not only by the stored sizes."""
    small.put("a" * 1400)  # 2
    small.put("b" * 1400)  # 3
    small.set()  # 4: removes both
    small.put("c")  # 5
    pages = audit_pages(lambda after: read(small, after))
    assert pages == [[1, 2, 3], [4, 5]]
    assert len(read(small, 3)[0][0]["changes"]["removed"]) == 2


@pytest.mark.parametrize("read", [http_page, mcp_page], ids=["http", "mcp"])
def test_a_limit_still_ends_a_page_and_every_event_is_read_once(
    small: Server, read: Callable[..., tuple[list[Any], int | None]]
) -> None:
    random.seed(7)
    for _ in range(30):
        small.put("x" * random.choice([10, 200, 900, 2500, 4500]))
    for limit in (1, 3, 1000):
        pages = audit_pages(lambda after: read(small, after, limit))  # noqa: B023
        versions = [v for page in pages for v in page]
        assert versions == list(range(1, 32)), limit
        assert all(0 < len(page) <= limit for page in pages[:-1])
    assert read(small, 0, 2)[1] == 2  # a full page names where to read on, as before


def test_the_mcp_audit_events_are_the_routes(server: Server) -> None:
    server.put("one", "two")
    server.set("three")
    server.http.delete(f"{PATH}/messages")
    reads = LedgerReads(server.ledger, log_agent_reads=False)
    answer = reads.audit(server.who, "chat", limit=2)
    entries = server.ledger.audit("chat", tenant=TENANT, limit=2)
    assert answer == {
        "key": "chat",
        "events": [AuditEvent(**vars(e)).model_dump(mode="json") for e in entries],
        "next_after": 2,
    }
    assert http_page(server, 0)[0] == mcp_page(server, 0)[0]


def test_the_audit_trail_is_encoded_in_the_routes_thread(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.put("one", "two")
    made = fastapi_serializations(monkeypatch)
    answer = server.http.get(f"{PATH}/events")
    assert answer.status_code == 200 and made == []
    entries = server.ledger.audit("chat", tenant=TENANT)
    model = AuditTrailAnswer(events=[AuditEvent(**vars(e)) for e in entries], next_after=None)
    assert answer.content == TypeAdapter(AuditTrailAnswer).dump_json(model, by_alias=True)
    call = SessionCall("chat", server.who, server.ledger)
    response = get_audit_trail(call, AuditInputs())
    assert isinstance(response.body, bytes) and response.body == answer.content


def test_an_audit_trail_of_no_session_is_not_found(small: Server) -> None:
    answer = small.http.get("/v1/sessions/nobody/events")
    assert answer.status_code == 404 and answer.json()["error"]["code"] == "session_not_found"


# The replay


def test_the_replay_is_the_models_json_encoded_in_the_routes_thread(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    server.put(*[f"m{i} é 😀 \u2028" for i in range(50)])
    version = server.set("kept", "new")
    made = fastapi_serializations(monkeypatch)
    for params in ({}, {"token_limit": 10**6}, {"as_of_version": 2, "token_limit": 20}):
        answer = server.http.get(f"{PATH}/replay", params=params)
        assert answer.status_code == 200, answer.text
        assert answer.headers["ETag"] == f'"{version}"'
        inputs = WindowInputs.model_validate(params)
        model = replayed(server.ledger, "chat", TENANT, inputs)
        assert answer.content == TypeAdapter(Replay).dump_json(model, by_alias=True)
    assert made == []
    response = replay_session(SessionCall("chat", server.who, server.ledger), WindowInputs())
    assert isinstance(response.body, bytes) and response.headers["ETag"] == f'"{version}"'


# The diff


def diff(server: Server, old: int, new: int) -> Any:
    return server.http.get(f"{PATH}/diff", params={"from_version": old, "to_version": new})


def expected_diff(server: Server, old: int, new: int) -> bytes:
    """The diff of the whole histories' texts (history_changes of them), as JSON."""
    texts = [
        server.ledger.history("chat", tenant=TENANT, as_of_version=v).json() for v in (old, new)
    ]
    model = HistoryDiff(
        from_version=old, to_version=new, from_count=len(texts[0]), to_count=len(texts[1]),
        changes=diff_route.history_changes(*texts),
    )  # fmt: skip
    return model.model_dump_json().encode()


def test_a_diff_of_a_history_over_the_bound_is_413_before_it_is_read(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    most = diff_route.MAX_DIFF_MESSAGES
    full = server.put(*[f"m{i}" for i in range(most)])
    over = server.put("one more")
    pages = counted(monkeypatch, server.ledger, "page")
    for old, new in ((full, over), (over, full), (over, over)):
        answer = diff(server, old, new)
        assert answer.status_code == 413, answer.text
        error = answer.json()["error"]
        assert error["code"] == "answer_too_large" and f"{most + 1} messages" in error["message"]
    # (the older history is read first, as before: only the one at the bound, once)
    assert {p["as_of_version"] for p in pages} == {full} and len(pages) == most // 1000
    answer = diff(server, full, full)  # at the bound: compared
    assert answer.status_code == 200 and answer.json()["changes"] == []


def changed(server: Server, texts: list[str], count: int, *, seed: int) -> tuple[int, int]:
    """The versions of a history of `texts` put, then set again with `count` of them (at
    random places) changed."""
    old = server.put(*texts)
    for at in random.Random(seed).sample(range(len(texts)), count):
        texts[at] = f"changed {at}"
    return old, server.set(*texts)


def test_a_diff_reads_each_history_in_its_pages_whatever_its_runs(
    paged: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two histories of 1,000 messages, 300 of them changed, differ in hundreds of runs;
    the histories are read once, 10 pages each (before: one more read for each side of
    each run)."""
    old, new = changed(paged, [f"m{i}" for i in range(1000)], 300, seed=1)
    pages = counted(monkeypatch, paged.ledger, "page")
    answer = diff(paged, old, new)
    assert answer.status_code == 200, answer.text
    assert len(answer.json()["changes"]) > 100
    assert len(pages) <= 2 * 10
    assert answer.content == expected_diff(paged, old, new)


def test_a_diff_of_histories_too_large_to_hold_reads_its_runs_in_one_pass(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Histories over the answer bytes are not held: the runs' text is read again, the
    pages that hold them (before: a read for each side of each run)."""
    for server in serve(max_page_messages=100, max_answer_bytes=40_000):
        texts = [f"message {i:04d} " + "x" * 20 for i in range(1000)]
        old, new = changed(server, texts, 100, seed=2)
        pages = counted(monkeypatch, server.ledger, "page")
        answer = diff(server, old, new)
        assert answer.status_code == 200, answer.text
        runs = answer.json()["changes"]
        assert len(runs) > 80 and all(c["kind"] == "replaced" for c in runs)
        first_pass = 2 * 10
        assert first_pass < len(pages) <= first_pass + 2 * 11
        assert answer.content == expected_diff(server, old, new)


def test_a_diff_that_takes_too_many_steps_is_413(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = [f"m{i}" for i in range(400)]
    old = server.put(*texts)
    swapped = [t for i in range(0, 400, 2) for t in (texts[i + 1], texts[i])]
    new = server.set(*swapped)
    assert diff(server, old, new).status_code == 200  # 400 runs: within the steps
    monkeypatch.setattr(diff_route, "MAX_DIFF_STEPS", 10_000)
    answer = diff(server, old, new)
    assert answer.status_code == 413 and answer.json()["error"]["code"] == "answer_too_large"
    assert "too many places" in answer.json()["error"]["message"]


def test_the_diff_is_encoded_in_the_routes_thread(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    old = server.put("a", "b", "c")
    new = server.set("a", "B", "c", "d")
    made = fastapi_serializations(monkeypatch)
    answer = diff(server, old, new)
    assert answer.status_code == 200 and made == []
    assert answer.content == expected_diff(server, old, new)
