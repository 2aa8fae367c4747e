"""A window read while another writer replaces the history is one state, not a mix:
the read sees the session's version change between its statements and reads again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_ledger, make_settings


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_write_between_the_statements_of_a_get(store: str, tmp_path: Path) -> None:
    ledger = make_ledger(make_settings(store, tmp_path))
    old = [{"role": "user", "content": f"old{i}"} for i in range(100)]
    ledger.set("s", old)
    views: Any = ledger.views
    fetch, calls = views._tuples, []

    def fetch_then_interfere(read: Any, sql: str, params: Any) -> Any:
        calls.append(sql)
        if len(calls) == 2:  # after the first tail batch, before the next statement
            ledger.set("s", [{"role": "user", "content": "new"}])
        return fetch(read, sql, params)

    views._tuples = fetch_then_interfere
    try:  # a window of 80 messages: longer than the first batch of the tail
        window = ledger.get("s", token_limit=80)
    finally:
        views._tuples = fetch
    assert [m.content for m in window] == ["new"]  # not old rows with a new tail
    assert len(calls) > 2  # the first attempt was seen to be stale and read again
    assert [m.content for m in ledger.get("s", token_limit=80, as_of_version=2)] == [
        f"old{i}" for i in range(20, 100)
    ]
    ledger.close()
