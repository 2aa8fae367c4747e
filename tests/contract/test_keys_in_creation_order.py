"""Session keys in the order their sessions were made (their first write), on every
store: paged by the last key of a page, with a prefix, without the cleared ones."""

from __future__ import annotations

import pytest

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.ledger import Ledger

MADE = ["m/c", "m/a", "x", "m/e", "m/b", "m/d"]


def write_all(ledger: Ledger) -> None:
    for key in MADE:
        ledger.put(key, {"role": "user", "content": key})
    ledger.put("m/c", {"role": "user", "content": "a later write keeps its place"})


def test_keys_are_listed_in_the_order_they_were_made(ledger: Ledger) -> None:
    write_all(ledger)
    assert ledger.keys(order="created") == MADE
    assert ledger.keys() == sorted(MADE)  # key order stays the default
    assert ledger.keys(order="created", prefix="m/") == [k for k in MADE if k != "x"]


def test_pages_follow_each_other_by_the_last_key(ledger: Ledger) -> None:
    write_all(ledger)
    for limit in (1, 2, 4):
        seen: list[str] = []
        while page := ledger.keys(order="created", after=(seen or [None])[-1], limit=limit):
            seen += page
        assert seen == MADE, limit
    assert ledger.keys(order="created", prefix="m/", after="m/e", limit=2) == ["m/b", "m/d"]


def test_cleared_sessions_are_left_out_and_a_bad_order_refused(ledger: Ledger) -> None:
    write_all(ledger)
    ledger.reset("m/a")
    assert ledger.keys(order="created", exclude_cleared=True) == [k for k in MADE if k != "m/a"]
    assert ledger.keys(order="created", exclude_cleared=True, after="m/a") == MADE[2:]
    with pytest.raises(InvalidInput, match="order must be one of key, created"):
        ledger.keys(order="newest")
