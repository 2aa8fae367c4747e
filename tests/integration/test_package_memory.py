"""The tenant package streams: however many sessions and events the tenant holds, it is
read a page of events and a page of keys at a time, at most one session's export is on
disk while it is sent, and no chunk is larger than one chunk of lines (counted, never
timed). The bench (`python -m bench.package_memory`) reports the peak RSS."""

from __future__ import annotations

import tarfile
import tempfile
from pathlib import Path
from typing import Any

import pytest

from session_ledger.domain.ledger import Ledger
from session_ledger.projections import package, tar_stream
from session_ledger.projections.export import EVENTS_PAGE
from session_ledger.projections.package import stream_package, verify_package
from tests.conftest import make_ledger, make_settings

SESSIONS = 12
EVENTS = EVENTS_PAGE * 2 + 7  # each session: two full pages and a part


@pytest.mark.slow
def test_a_package_holds_a_page_of_rows_and_one_session_at_a_time(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger: Ledger = make_ledger(make_settings("memory", tmp_path))
    for s in range(SESSIONS):
        for i in range(EVENTS - 1):
            ledger.put(f"s{s:02d}", {"role": "user", "content": f"{i} " + "x" * 200})

    pages: list[int] = []
    select = ledger.recorder.select_events

    def counted(*args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("limit") == EVENTS_PAGE  # never an unbounded read
        rows = select(*args, **kwargs)
        pages.append(len(rows))
        return rows

    key_pages: list[int] = []
    keys = ledger.keys

    def keys_counted(*args: Any, **kwargs: Any) -> Any:
        assert kwargs.get("limit") == package.KEYS_PAGE
        found = keys(*args, **kwargs)
        key_pages.append(len(found))
        return found

    monkeypatch.setattr(ledger.recorder, "select_events", counted)
    monkeypatch.setattr(ledger, "keys", keys_counted)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    on_disk, biggest, size = 0, 0, 0
    with (tmp_path / "p.tar").open("wb") as out:
        for chunk in stream_package(ledger, ledger.default_tenant, exported_by="test"):
            out.write(chunk)
            size += len(chunk)
            biggest = max(biggest, len(chunk))
            on_disk = max(on_disk, len(list((tmp_path / "tmp").glob("*/package/sessions/*"))))
    assert pages == [EVENTS_PAGE, EVENTS_PAGE, 7] * SESSIONS  # a page of events at a time
    assert key_pages == [SESSIONS, 0]
    assert on_disk == 1  # each session's export removed once sent
    line = 2_000  # an event line here is well under this
    assert biggest <= tar_stream.CHUNK_BYTES + line and size > 20 * biggest
    assert list((tmp_path / "tmp").iterdir()) == []  # the temporary folder is gone
    assert verify_package(tmp_path / "p.tar") == []
    with tarfile.open(tmp_path / "p.tar") as tar:
        assert len(tar.getnames()) == SESSIONS + 3
