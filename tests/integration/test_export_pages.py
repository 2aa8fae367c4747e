"""An export's reads end before `max_answer_bytes`, as the API's answers do: a session of a
few large writes is read an event at a time (JSONL), its history a page at a time (CSV),
never whole. Counted reads and tracemalloc's peak, never a clock."""

from __future__ import annotations

import csv
import io
import tracemalloc
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.ledger import Ledger
from session_ledger.projections.export import export_session
from session_ledger.projections.export_verify import verify_export
from tests.conftest import make_ledger, make_settings

ANSWER = 256 * 1024
WRITES = 16
TEXT = "word " * 20_000  # 100 KB a message, 300 KB a write: over ANSWER alone


@pytest.fixture(params=["sqlite", pytest.param("postgres", marks=pytest.mark.postgres)])
def ledger(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Ledger]:
    ledger = make_ledger(make_settings(request.param, tmp_path, max_answer_bytes=ANSWER))
    for write in range(WRITES):
        ledger.put_messages("large", [
            {"role": "user", "content": f"{write}.{i} {TEXT}"} for i in range(3)
        ])  # fmt: skip
    for i in range(5):
        ledger.put("large", {"role": "user", "content": f"small {i}"})
    yield ledger
    ledger.close()


def test_events_are_read_a_few_at_a_time_by_their_size(
    ledger: Ledger, monkeypatch: pytest.MonkeyPatch
) -> None:
    held: list[list[int]] = []
    select = ledger.recorder.select_events

    def counted(*args: Any, **kwargs: Any) -> Any:
        rows = select(*args, **kwargs)
        held.append([len(row.state) for row in rows])
        return rows

    monkeypatch.setattr(ledger.recorder, "select_events", counted)
    lines = b"".join(export_session(ledger, "large"))
    # Its start, then each large write alone, then the small writes together.
    assert [len(page) for page in held] == [1] * (1 + WRITES) + [5]
    assert all(len(page) == 1 or sum(page) <= ANSWER for page in held)
    report = verify_export(io.BytesIO(lines))
    assert report.ok and report.events == 1 + WRITES + 5, report.summary()


def test_the_csv_history_is_read_a_page_at_a_time(ledger: Ledger) -> None:
    """Exporting the whole history holds no more than exporting its first half."""

    def peak(as_of_version: int) -> tuple[int, int]:
        tracemalloc.start()
        try:
            chunks = export_session(ledger, "large", format="csv", as_of_version=as_of_version)
            size = sum(len(chunk) for chunk in chunks)
            return tracemalloc.get_traced_memory()[1], size
        finally:
            tracemalloc.stop()

    text = b"".join(export_session(ledger, "large", format="csv")).decode()
    rows = list(csv.reader(io.StringIO(text)))
    assert [row[2] for row in rows[1:]] == [m.content for m in ledger.get_all("large")]
    (half, half_size), (whole, size) = peak(1 + WRITES // 2), peak(ledger.head("large").version)
    assert size > 2 * half_size and whole < half + ANSWER, (half, whole, size)
