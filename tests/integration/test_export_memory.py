"""Exporting a 20,000-event session reads it a page at a time and holds a small fraction
of it in memory (counted reads and tracemalloc's peak, never a clock)."""

from __future__ import annotations

import hashlib
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from session_ledger.projections.export import EVENTS_PAGE, export_session
from session_ledger.projections.export_verify import verify_export
from tests.conftest import make_ledger, make_settings

EVENTS = 20_000
TEXT = "x" * 1000  # ~1 KB per message: the session is tens of megabytes


@pytest.mark.slow
def test_a_long_export_streams_in_pages(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ledger = make_ledger(make_settings("memory", tmp_path))
    for i in range(EVENTS - 1):
        ledger.put("long", {"role": "user", "content": f"{i} {TEXT}"})
    assert ledger.head("long").version == EVENTS

    pages: list[int] = []
    select = ledger.recorder.select_events

    def counted(*args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("limit") == EVENTS_PAGE  # never an unbounded read
        rows = select(*args, **kwargs)
        pages.append(len(rows))
        return rows

    monkeypatch.setattr(ledger.recorder, "select_events", counted)
    digest, size = hashlib.sha256(), 0
    tracemalloc.start()
    try:
        for chunk in export_session(ledger, "long"):
            digest.update(chunk)
            size += len(chunk)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert pages == [EVENTS_PAGE] * (EVENTS // EVENTS_PAGE)
    assert size > 40_000_000  # the whole export: base64 of the state plus the payload
    assert peak < size / 10, (peak, size)  # a page of events, not the session

    monkeypatch.undo()
    with (tmp_path / "export.jsonl").open("wb") as out:
        for chunk in export_session(ledger, "long"):
            out.write(chunk)
    tracemalloc.start()
    try:
        with (tmp_path / "export.jsonl").open("rb") as lines:
            report = verify_export(lines)
        _, verify_peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert report.ok and report.events == EVENTS, report.summary()
    assert verify_peak < size / 100, (verify_peak, size)  # one line at a time
    ledger.close()
