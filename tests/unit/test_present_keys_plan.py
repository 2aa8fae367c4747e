"""`get_keys` of the LlamaIndex adapters asks for pages of keys only: the store leaves the
cleared sessions out, so a remote store answers in one request per page, not one per key."""

from __future__ import annotations

from session_ledger.api.llamaindex import plans


def test_present_keys_asks_for_pages_only() -> None:
    plan = plans.present_keys()
    asked = [next(plan)]
    pages = [(["a", "b"], "b"), (["c"], None)]
    try:
        for page in pages:
            asked.append(plan.send(page))
    except StopIteration as done:
        assert done.value == ["a", "b", "c"]
    else:
        raise AssertionError("the plan asked for more than the pages")
    assert asked == [("keys", (None,)), ("keys", ("b",))]
