"""A read while another writer changes the session is one state, not a mix: the read
sees the session's version change between its statements and reads again."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.conftest import make_ledger, make_settings


def _write_before_the_second_statement(ledger: Any, write: Any) -> Any:
    """Patch the views so that `write()` lands between a read's first and second
    statements; returns the statements seen and a function that restores the views."""
    rows: Any = ledger.views.rows  # type: ignore[attr-defined]
    fetch, calls = rows.tuples, []

    def fetch_with_a_write_between(read: Any, sql: str, params: Any) -> Any:
        calls.append(sql)
        if len(calls) == 2:
            write()
        return fetch(read, sql, params)

    rows.tuples = fetch_with_a_write_between
    return calls, lambda: setattr(rows, "tuples", fetch)


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_write_between_the_statements_of_a_get(store: str, tmp_path: Path) -> None:
    ledger = make_ledger(make_settings(store, tmp_path))
    old = [{"role": "user", "content": f"old{i}"} for i in range(100)]
    ledger.set("s", old)
    new = [{"role": "user", "content": "new"}]
    # (after the first tail batch, before the next statement)
    calls, restore = _write_before_the_second_statement(ledger, lambda: ledger.set("s", new))
    try:  # a window of 80 messages: longer than the first batch of the tail
        window = ledger.get("s", token_limit=80)
    finally:
        restore()
    assert [m.content for m in window] == ["new"]  # not old rows with a new tail
    assert len(calls) > 2  # the first attempt was seen to be stale and read again
    assert [m.content for m in ledger.get("s", token_limit=80, as_of_version=2)] == [
        f"old{i}" for i in range(20, 100)
    ]
    ledger.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
@pytest.mark.parametrize("read", ["window", "history"])
def test_a_write_after_a_read_found_no_message(store: str, read: str, tmp_path: Path) -> None:
    """A read whose rows statement finds no message asks for the version in a statement
    of its own: a message written between the two must not make it answer the new
    version with no messages (the version and the rows come from one state)."""
    ledger = make_ledger(make_settings(store, tmp_path))
    ledger.put("s", {"role": "user", "content": "old"})
    ledger.reset("s")  # a session with no message
    hello = {"role": "user", "content": "hello"}
    calls, restore = _write_before_the_second_statement(ledger, lambda: ledger.put("s", hello))
    try:
        answer = getattr(ledger, read)("s")
    finally:
        restore()
    assert len(calls) >= 2
    head = ledger.head("s").version
    if answer.version == head:  # read again after the write: its message is there
        assert [m.content for m in answer.messages()] == ["hello"]
    else:  # or the reset's version, as it was: no message
        assert (answer.version, answer.messages()) == (head - 1, [])
    ledger.close()


@pytest.mark.parametrize("store", ["sqlite", "postgres"])
def test_a_page_past_the_end_while_a_write_lands(store: str, tmp_path: Path) -> None:
    """A history page past the last message is empty for the version it names."""
    ledger = make_ledger(make_settings(store, tmp_path))
    ledger.put_messages("s", [{"role": "user", "content": f"m{i}"} for i in range(3)])
    more = [{"role": "user", "content": f"n{i}"} for i in range(3)]
    calls, restore = _write_before_the_second_statement(
        ledger, lambda: ledger.put_messages("s", more)
    )
    try:
        page = ledger.history("s", offset=4, limit=2)
    finally:
        restore()
    assert len(calls) >= 2
    head = ledger.head("s").version
    if page.version == head:
        assert [m.content for m in page.messages()] == ["n1", "n2"]
    else:
        assert (page.version, page.messages()) == (head - 1, [])
    ledger.close()
