"""A refused message names the place of what is wrong in it, as a path into the message
(`blocks[0].meta.x[2]`), however deep."""

from __future__ import annotations

from typing import Any

import pytest

from session_ledger.domain.errors import InvalidMessage
from session_ledger.domain.messages import ChatMessage


def text(**kwargs: Any) -> dict[str, Any]:
    return {"role": "user", "content": "x", "additional_kwargs": kwargs}


CASES = [
    ({"role": "user", "blocks": [{"block_type": "text", "text": "a\ud800"}]},
     "blocks[0].text contains a lone surrogate (U+D800) at offset 1"),
    ({"role": "user", "blocks": [{"block_type": "text", "text": "ok",
                                  "meta": {"x": [1, 2, float("nan")]}}]},
     "blocks[0].meta.x[2] is nan, which JSON cannot hold"),
    ({"role": "user", "blocks": [{"block_type": "image", "url": {1: "x"}}]},
     "blocks[0].url has a non-string key 1"),
    (text(tool_calls=[{"args": {"a": object()}}]),
     "additional_kwargs.tool_calls[0].args.a holds a object, which is not JSON"),
    (text(**{"k\udc00": 1}), "additional_kwargs contains a lone surrogate (U+DC00)"),
    (text(f=float("inf")), "additional_kwargs.f is inf, which JSON cannot hold"),
    (text(b=b"x"), "additional_kwargs.b holds a bytes, which is not JSON"),
    ({"role": "user", "blocks": ["nope"]}, "blocks[0] must be an object"),
    ({"role": "user", "blocks": [{"block_type": "text", "text": 3}]},
     "blocks[0].text must be a string"),
    ({"role": "user", "content": "x", "extra": 1, 2: 3}, "unknown message fields: 2, extra"),
    (text(deep=[[[[1]]]]), None),  # nesting within the limit is kept
]  # fmt: skip


@pytest.mark.parametrize(("message", "error"), CASES)
def test_the_error_names_the_place(message: dict[str, Any], error: str | None) -> None:
    if error is None:
        assert ChatMessage.parse(message).additional_kwargs == message["additional_kwargs"]
        return
    with pytest.raises(InvalidMessage) as raised:
        ChatMessage.parse(message)
    assert str(raised.value).startswith(error)


def test_too_deep_names_the_innermost_place() -> None:
    nested: Any = 1
    for _ in range(70):
        nested = [nested]
    with pytest.raises(InvalidMessage) as raised:
        ChatMessage.parse(text(deep=nested))
    assert str(raised.value) == (
        "additional_kwargs.deep" + "[0]" * 64 + " is nested deeper than 64 levels"
    )


@pytest.mark.parametrize(
    "message",
    [
        {"role": "A" * 10**6, "content": "x"},
        {"role": "user", "content": "x", "B" * 10**6: 1},
        {"role": "user", "blocks": [{"block_type": "C" * 10**6}]},
        {"role": "user", "content": "x", "additional_kwargs": {"k" * 10**6: float("nan")}},
        {"role": "user", "content": "x", "additional_kwargs": {"k": {10**1000: 1}}},
    ],
    ids=["role", "field", "block type", "kwargs key", "non-string key"],
)
def test_a_huge_refused_value_is_named_cut_short(message: dict[str, Any]) -> None:
    """An error names what it refused in at most ~100 characters of it: a 1 MB role is not
    echoed back in a 1 MB 422."""
    with pytest.raises(InvalidMessage) as refused:
        ChatMessage.parse(message)
    assert len(str(refused.value)) < 400, str(refused.value)[:500]
