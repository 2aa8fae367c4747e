"""The ledger's own numbers on /metrics: events written by type, store calls timed per
operation, version conflicts, write retries, rate-limit refusals; and the request id every
answer carries."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from fastapi.testclient import TestClient
from prometheus_client.parser import text_string_to_metric_families

from session_ledger.api.app import create_app
from session_ledger.api.app_observer import AppObserver
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.metrics import Metrics
from session_ledger.api.settings import Settings

MESSAGE = {"messages": [{"role": "user", "content": "hello"}]}


def samples(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    """Every sample of a Prometheus text answer, by name and labels."""
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def value(found: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str,
          **labels: str) -> float:  # fmt: skip
    return found.get((name, frozenset(labels.items())), 0.0)


@pytest.fixture
def api() -> Iterator[TestClient]:
    settings = Settings(database_url="memory://", tokenizer="whitespace")
    ledger = open_ledger(settings)
    store = MemoryKeyStore()
    _, secret = store.create("acme", "admin")
    app = create_app(settings, ledger=ledger, key_store=store)
    try:
        yield TestClient(app, headers={"Authorization": f"Bearer {secret}"})
    finally:
        ledger.close()


def test_events_by_type_store_calls_and_conflicts_are_counted(api: TestClient) -> None:
    for _ in range(3):
        assert api.post("/v1/sessions/chat/messages", json=MESSAGE).status_code == 200
    assert api.get("/v1/sessions/chat/context").status_code == 200
    assert api.get("/v1/sessions/chat/messages").status_code == 200
    stale = api.post("/v1/sessions/chat/messages", json=MESSAGE, headers={"If-Match": '"1"'})
    assert stale.status_code == 412
    assert api.delete("/v1/sessions/chat/messages/last").status_code == 200

    found = samples(api.get("/metrics").text)
    events = "session_ledger_events_written_total"
    assert value(found, events, type="SessionStarted") == 1
    assert value(found, events, type="MessagesAppended") == 3
    assert value(found, events, type="MessageRemoved") == 1
    store = "session_ledger_store_duration_seconds_count"
    assert value(found, store, operation="write") == 4  # the refused write never saved
    assert value(found, store, operation="read_window") == 1
    assert value(found, store, operation="read_history") == 1
    assert value(found, "session_ledger_version_conflicts_total") == 1
    assert value(found, "session_ledger_write_retries_total") == 0


def test_a_write_that_lost_the_race_is_counted_as_retried(tmp_path: Path) -> None:
    """Two ledgers on one SQLite file: the first's cached copy of the session is stale
    after the second wrote, so its next save loses the race once and runs again. The
    second, which never saw the session, takes it for new: that save fails on version 1
    and the write runs again on the stored state, without counting as a lost race."""
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'ledger.db'}", tokenizer="whitespace")
    metrics = Metrics()
    first, second = open_ledger(settings), open_ledger(settings)
    try:
        first.observer = second.observer = AppObserver(metrics)
        first.put("chat", {"role": "user", "content": "one"})
        second.put("chat", {"role": "user", "content": "two"})
        first.put("chat", {"role": "user", "content": "three"})
    finally:
        first.close()
        second.close()
    found = samples(metrics.exposition().decode())
    assert value(found, "session_ledger_write_retries_total") == 1
    assert value(found, "session_ledger_events_written_total", type="MessagesAppended") == 3
    # A save that failed is still a store call: 3 won, 1 lost the race, 1 guessed new.
    assert value(found, "session_ledger_store_duration_seconds_count", operation="write") == 5


def test_rate_limit_refusals_are_counted_by_code_and_limit() -> None:
    settings = Settings(database_url="memory://", rate_limit_key_per_second=1e-6,
                        rate_limit_key_burst=1)  # fmt: skip
    ledger = open_ledger(settings)
    store = MemoryKeyStore()
    _, secret = store.create("acme", "agent")
    api = TestClient(create_app(settings, ledger=ledger, key_store=store),
                     headers={"Authorization": f"Bearer {secret}"})  # fmt: skip
    try:
        answers = [api.get("/v1/sessions/chat/context").status_code for _ in range(3)]
        found = samples(api.get("/metrics").text)
    finally:
        ledger.close()
    assert answers == [404, 429, 429]
    refusals = {labels: v for (name, labels), v in found.items()
                if name == "session_ledger_rate_limit_refusals_total"}  # fmt: skip
    assert refusals == {frozenset({("code", "rate_limited"), ("limit", "requests:key")}): 2}


def test_a_sane_request_id_is_answered_back_and_any_other_replaced(api: TestClient) -> None:
    given = "req-7f3a.b:c/d+e=f@g"
    assert api.get("/healthz", headers={"X-Request-ID": given}).headers["X-Request-ID"] == given
    made = [api.get("/healthz").headers["X-Request-ID"] for _ in range(2)]
    assert all(re.fullmatch(r"[0-9a-f]{32}", m) for m in made) and made[0] != made[1]
    for bad in ("has space", "x" * 129, 'quote"d', ""):
        answered = api.get("/healthz", headers={"X-Request-ID": bad}).headers["X-Request-ID"]
        assert answered != bad and re.fullmatch(r"[0-9a-f]{32}", answered)
    # Error answers carry it too (a 404 from the router, a 401 from authentication).
    assert "X-Request-ID" in api.get("/nowhere").headers
    assert "X-Request-ID" in api.get("/v1/keys", headers={"Authorization": "Bearer x"}).headers
