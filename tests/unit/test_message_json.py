"""Stored message text decodes to the message that was stored.

Reads decode with pydantic-core's JSON parser, writes encode with the standard library's:
the two must agree on everything `ChatMessage.parse` accepts (any Unicode scalar value,
escapes, integers of any size, floats to the last bit, nesting to the limit).
"""

from __future__ import annotations

import json
import math
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_ledger.domain.errors import InvalidMessage
from session_ledger.domain.messages import MAX_NESTING, ChatMessage

# What parse keeps: text without lone surrogates, finite floats, ints of any size.
texts = st.text(st.characters(exclude_categories=("Cs",)), max_size=40)
scalars = (
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**200), max_value=2**200)
    | st.floats(allow_nan=False, allow_infinity=False)
    | texts
)
values = st.recursive(
    scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(texts, inner, max_size=4),
    max_leaves=20,
)
messages = st.builds(
    lambda role, text, kwargs: ChatMessage.text(role, text, **kwargs),
    st.sampled_from(["system", "user", "assistant", "tool"]),
    texts,
    st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), values, max_size=3),
)


def same(a: object, b: object) -> bool:
    """Equal, with floats compared bit for bit (0.0 and -0.0 differ)."""
    if isinstance(a, float) and isinstance(b, float):
        return math.copysign(1, a) == math.copysign(1, b) and a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(map(same, a, b))
    return type(a) is type(b) and a == b


@settings(max_examples=300, deadline=None)
@given(st.lists(messages, max_size=6))
def test_stored_text_decodes_to_the_stored_message(stored: list[ChatMessage]) -> None:
    texts = [m.to_json() for m in stored]
    decoded = ChatMessage.many_from_json(texts)
    assert [m.to_json() for m in decoded] == texts
    for original, again, text in zip(stored, decoded, texts, strict=True):
        assert same(again.additional_kwargs, json.loads(text)["additional_kwargs"])
        assert same(again.additional_kwargs, original.additional_kwargs)
        assert again == original == ChatMessage.from_json(text)


def test_edges_of_numbers_text_and_nesting() -> None:
    kwargs = {
        "ints": [0, -1, 2**64, -(2**63) - 1, 10**40],
        "floats": [-0.0, 5e-324, 2.2250738585072014e-308, sys.float_info.max, 0.1 + 0.2],
        "chars": '\x00\x1f\u2028\ud7ff\ue000\U0010ffff"\\/é😀',
        "deep": [[[[[]]]]],
    }
    deep: object = "bottom"
    for _ in range(MAX_NESTING - 1):  # the deepest value parse accepts
        deep = [deep]
    with pytest.raises(InvalidMessage):
        ChatMessage.text("user", "too deep", nested=[deep])
    message = ChatMessage.text("user", "\x00 NUL and \U0001f600", **kwargs, nested=deep)
    (decoded,) = ChatMessage.many_from_json([message.to_json()])
    assert same(decoded.additional_kwargs, message.additional_kwargs)
    assert decoded.to_json() == message.to_json()
    assert decoded.content == "\x00 NUL and \U0001f600"


def test_many_decodes_in_order_across_chunk_boundaries() -> None:
    # Chunks are cut at about 64 KB of text: short texts share one, a text longer than
    # that is decoded alone, and the order and every message survive the cuts.
    lengths = [10] * 3000 + [70_000] + [500] * 300 + [65_536, 1] + [4_000] * 40
    stored = [ChatMessage.text("user", f"{i}:" + "x" * n) for i, n in enumerate(lengths)]
    texts = [m.to_json() for m in stored]
    decoded = ChatMessage.many_from_json(texts)
    assert decoded == stored
    assert [m.to_json() for m in decoded] == texts
    assert ChatMessage.many_from_json([]) == []
