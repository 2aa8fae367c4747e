"""Retention inside `serve`: the timer applies the rules at its interval, and several
processes applying them at once erase each session once, with no error."""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from session_ledger.api.timers import start_retention_timer
from session_ledger.domain.compliance import RetentionAction, parse_retention
from session_ledger.domain.errors import InvalidInput, SessionErasedError
from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings
from tests.integration.test_erasure import master_key

LATER = datetime(2100, 1, 1, tzinfo=UTC)  # every session written now is past its rule then


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_two_processes_applying_retention_erase_each_session_once(
    store: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    settings = make_settings(store, tmp_path, master_key=master_key())
    if store == "postgres":
        settings.database_url = request.getfixturevalue("fresh_postgres_url")
    settings.retention = f"{settings.default_tenant}:request/:1"
    first, second = make_ledger(settings), make_ledger(settings)
    try:
        keys = [f"request/{n}" for n in range(12)]
        for key in keys:
            first.put(key, {"role": "user", "content": f"hello {key}"})
        first.put("user/1", {"role": "user", "content": "kept"})
        rules = parse_retention(settings.retention)
        done: dict[str, list[RetentionAction]] = {}
        failures: list[BaseException] = []
        start = threading.Barrier(2)

        def apply(name: str, ledger: Ledger) -> None:
            try:
                start.wait()
                done[name] = list(ledger.retention(rules, LATER, dry_run=False))
            except BaseException as exc:  # reported by the assertion below
                failures.append(exc)

        threads = [threading.Thread(target=apply, args=(n, lg))
                   for n, lg in (("first", first), ("second", second))]  # fmt: skip
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert failures == []
        erased = sorted(a.key for acts in done.values() for a in acts if a.action == "erased")
        assert erased == sorted(keys)  # each session by one process, none twice
        for key in keys:
            trail = first.audit(key)
            assert [e.event_type for e in trail].count("SessionErased") == 1
            assert first.verify(key).intact
        assert first.get_all("user/1")[0].content == "kept"
    finally:
        first.close()
        second.close()


def test_the_timer_applies_the_rules_at_its_interval(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path, master_key=master_key(),
                             retention_interval_minutes=0.01)  # fmt: skip
    settings.retention = f"{settings.default_tenant}:request/:1"
    ledger = make_ledger(settings)
    try:
        ledger.put("request/a", {"role": "user", "content": "old"})
        ledger.put("user/a", {"role": "user", "content": "kept"})
        stop = start_retention_timer(settings, clock=lambda: LATER)
        assert stop is not None
        try:
            for _ in range(600):  # the first round comes after one interval (0.6 s)
                try:
                    ledger.get_all("request/a")
                except SessionErasedError:
                    break
                time.sleep(0.1)
            else:
                pytest.fail("the timer did not erase request/a")
        finally:
            stop.set()
        assert ledger.get_all("user/a")[0].content == "kept"
        assert ledger.audit("request/a")[-1].actor == "retention"
    finally:
        ledger.close()


def test_no_timer_without_an_interval_and_none_without_rules(tmp_path: Path) -> None:
    settings = make_settings("sqlite", tmp_path)
    assert start_retention_timer(settings) is None
    settings.retention_interval_minutes = 5
    with pytest.raises(InvalidInput, match="LEDGER_RETENTION"):
        start_retention_timer(settings)
