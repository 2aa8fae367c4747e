"""The diff of two histories (what the viewer's diff screen shows): its runs, applied to
the older history, give the newer one, and each run is as small as the common head and
tail allow."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from session_ledger.api.routes.diff import history_changes
from session_ledger.domain.messages import ChatMessage

texts = st.lists(st.sampled_from(["a", "b", "c", "d"]), max_size=12)


def history(words: list[str]) -> list[str]:
    return [ChatMessage.parse({"role": "user", "content": w}).to_json() for w in words]


def apply(old: list[str], changes: list[Any]) -> list[Any]:
    result: list[Any] = []
    at = 0
    for change in changes:
        result += [json.loads(m) for m in old[at : change.from_position]]
        result += [m.model_dump() for m in change.added]
        at = change.from_position + len(change.removed)
    return result + [json.loads(m) for m in old[at:]]


@given(texts, texts)
def test_the_runs_turn_the_older_history_into_the_newer(
    before: list[str], after: list[str]
) -> None:
    old, new = history(before), history(after)
    changes = history_changes(old, new)
    assert apply(old, changes) == [json.loads(m) for m in new]
    assert (changes == []) == (old == new)
    for change in changes:
        assert change.kind == {(True, False): "removed", (False, True): "added"}.get(
            (bool(change.removed), bool(change.added)), "replaced"
        )


def test_a_replaced_message_and_an_append_are_two_runs() -> None:
    changes = history_changes(history(["a", "b", "c"]), history(["a", "B", "c", "d"]))
    assert [(c.kind, c.from_position, c.to_position) for c in changes] == [
        ("replaced", 1, 1),
        ("added", 3, 3),
    ]
