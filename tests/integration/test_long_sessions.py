"""A put on a session of 100,000 events reads as few events as on one of 100."""

from __future__ import annotations

from pathlib import Path

import pytest

from session_ledger.domain.session import session_id
from tests.conftest import make_ledger, make_settings
from tests.integration.test_cost_does_not_grow import EventReads, message

SNAPSHOT_INTERVAL = 200


@pytest.mark.slow
def test_events_read_per_put_are_bounded_at_100_000_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger = make_ledger(make_settings("memory", tmp_path, snapshot_interval=SNAPSHOT_INTERVAL))
    for i in range(99):
        ledger.put("short", message(i))
    for i in range(99_999):
        ledger.put("long", message(i))
    assert ledger.head("short").version == 100 and ledger.head("long").version == 100_000

    reads = EventReads(ledger, monkeypatch)
    warm = [reads.during(lambda k=k: ledger.put(k, message(0))) for k in ("short", "long")]
    assert warm == [0, 0]  # the cached state: no reads at all

    cold = []
    for key in ("short", "long"):
        sid = session_id(ledger.default_tenant, key)
        ledger.repository.cache.get(sid, evict=True)  # type: ignore[union-attr]  # a new process
        cold.append(reads.during(lambda k=key: ledger.put(k, message(1))))
    # the latest snapshot plus the events after it, whatever the length of the stream
    assert all(1 <= n <= SNAPSHOT_INTERVAL + 1 for n in cold), cold
    ledger.close()
