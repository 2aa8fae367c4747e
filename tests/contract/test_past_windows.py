"""A past version's window holds what that version held, however many of its rows a
later write ended, on every store: a version's rows are read from two tables (still
live, ended since) in batches, and the merge must not skip rows at a batch's end."""

from __future__ import annotations

from typing import Any

import pytest

from session_ledger.domain.ledger import Ledger
from session_ledger.projections.sql import TAIL_BATCH

TOKENIZERS = [
    pytest.param({}, id="stored-counts"),
    pytest.param({"tokenizer": str.split}, id="callers"),
]


def texts(messages: list[Any]) -> list[str]:
    return [m.content for m in messages]


@pytest.mark.parametrize("tokenizer", TOKENIZERS)
def test_a_version_longer_than_a_batch_with_its_first_row_ended(
    ledger: Ledger, tokenizer: dict[str, Any]
) -> None:
    count = TAIL_BATCH + 2  # 66: one row ended, the 65 still live span a batch's end
    ledger.put_messages("s", [{"role": "user", "content": f"message {i}"} for i in range(count)])
    ledger.delete_message("s", 0)
    version = 2  # (1: the session started, 2: its messages)
    every = [f"message {i}" for i in range(count)]
    assert texts(ledger.get_all("s", as_of_version=version)) == every
    whole = ledger.get("s", token_limit=1_000, as_of_version=version, **tokenizer)
    assert texts(whole) == every
    all_but_the_first = 2 * count - 1  # two tokens a message
    cut = ledger.get("s", token_limit=all_but_the_first, as_of_version=version, **tokenizer)
    assert texts(cut) == every[1:]
    at = ledger.head("s", as_of_version=version).updated_at
    assert texts(ledger.get("s", token_limit=1_000, as_of=at, **tokenizer)) == every
