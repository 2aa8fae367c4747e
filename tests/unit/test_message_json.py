"""A stored message body decodes to the message that was stored.

Reads decode with pydantic-core's JSON parser, writes encode with the standard library's:
the two must agree on everything `ChatMessage.parse` accepts (any Unicode scalar value,
escapes, integers of any size, floats to the last bit, nesting to the limit). A message
of one text block and no additional_kwargs is stored as its text's JSON string alone;
every other message as its canonical JSON. Both must give back the message, and its
canonical JSON without a decode.
"""

from __future__ import annotations

import copy
import json
import math
import pickle
import sys
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_ledger.domain.errors import InvalidMessage
from session_ledger.domain.messages import MAX_NESTING, ChatMessage
from session_ledger.projections.bodies import body_json, decode_bodies, decode_body, stored_body

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
roles = st.sampled_from(["system", "user", "assistant", "tool"])
kwargs = st.dictionaries(st.from_regex(r"[a-z_]{1,8}", fullmatch=True), values, max_size=3)
text_blocks = st.builds(lambda t: {"block_type": "text", "text": t}, texts)
# Shapes near the plain one: the text first, an extra key, a second block, other blocks.
other_blocks = (
    st.builds(lambda t: {"text": t, "block_type": "text"}, texts)
    | st.builds(lambda t, v: {"block_type": "text", "text": t, "extra": v}, texts, values)
    | st.builds(lambda u: {"block_type": "image", "url": u}, texts)
)
messages = st.builds(
    lambda role, text, kw: ChatMessage.text(role, text, **kw), roles, texts, kwargs
) | st.builds(
    lambda role, blocks, kw: ChatMessage.parse(
        {"role": role, "blocks": blocks, "additional_kwargs": kw}
    ),
    roles,
    st.lists(text_blocks | other_blocks, max_size=3),
    kwargs,
)


def row(m: ChatMessage) -> tuple[str, str]:
    """The message as a store keeps it: (role, stored body)."""
    d = {"role": m.role, "blocks": list(m.blocks), "additional_kwargs": m.additional_kwargs}
    return m.role, stored_body(d, m.to_json())


def is_plain(m: ChatMessage) -> bool:
    return (
        not m.additional_kwargs
        and len(m.blocks) == 1
        and list(m.blocks[0]) == ["block_type", "text"]
        and m.blocks[0]["block_type"] == "text"
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
def test_a_stored_body_decodes_to_the_stored_message(stored: list[ChatMessage]) -> None:
    texts = [m.to_json() for m in stored]
    rows = [row(m) for m in stored]
    decoded = decode_bodies(rows)
    assert [m.to_json() for m in decoded] == texts
    assert [body_json(role, body) for role, body in rows] == texts
    for original, again, text, (role, body) in zip(stored, decoded, texts, rows, strict=True):
        # The plain shape, and only it, is kept as the text's JSON string.
        assert (body == json.dumps(original.content, ensure_ascii=False)) == is_plain(original)
        assert body.startswith('"') == is_plain(original)
        assert same(again.additional_kwargs, json.loads(text)["additional_kwargs"])
        assert same(again.additional_kwargs, original.additional_kwargs)
        assert same(list(again.blocks), list(original.blocks))
        assert again.content == original.content
        assert again == original == ChatMessage.from_json(text) == decode_body(role, body)


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
    (decoded,) = decode_bodies([row(message)])
    assert same(decoded.additional_kwargs, message.additional_kwargs)
    assert decoded.to_json() == message.to_json()
    assert decoded.content == "\x00 NUL and \U0001f600"


def test_many_decodes_in_order_across_chunk_boundaries() -> None:
    # Chunks are cut at about 64 KB of text: short texts share one, a text longer than
    # that is decoded alone, and the order and every message survive the cuts.
    lengths = [10] * 3000 + [70_000] + [500] * 300 + [65_536, 1] + [4_000] * 40
    stored = [ChatMessage.text("user", f"{i}:" + "x" * n) for i, n in enumerate(lengths)]
    texts = [m.to_json() for m in stored]
    # Plain bodies and canonical JSON mixed in one chunk, and one long one alone.
    stored[5] = ChatMessage.text("user", "kw", tool_call_id="c1")
    stored[3000] = ChatMessage.text("tool", "x" * 70_000, tool_call_id="c2")
    texts = [m.to_json() for m in stored]
    decoded = decode_bodies([row(m) for m in stored])
    assert decoded == stored
    assert [m.to_json() for m in decoded] == texts
    assert decode_bodies([]) == []


def test_a_message_read_as_text_is_the_same_value() -> None:
    made = ChatMessage.text("user", "héllo\x00")
    (read,) = decode_bodies([row(made)])
    assert read == made and made == read and read != ChatMessage.text("user", "other")
    assert read != ChatMessage.text("assistant", "héllo\x00")
    assert (
        repr(read)
        == repr(made)
        == (
            "ChatMessage(role='user', blocks=({'block_type': 'text', 'text': 'héllo\\x00'},), "
            "additional_kwargs={})"
        )
    )
    for again in (pickle.loads(pickle.dumps(read)), copy.deepcopy(read), copy.copy(read)):
        assert again == read and again.to_json() == made.to_json()
    match read:
        case ChatMessage("user", ({"text": text},), {}):
            assert text == "héllo\x00"
        case _:
            pytest.fail("the message does not match its fields")


def test_a_message_is_immutable_and_unhashable() -> None:
    (read,) = decode_bodies([row(ChatMessage.text("user", "hi"))])
    for field, value in (("role", "tool"), ("blocks", ()), ("additional_kwargs", {})):
        with pytest.raises(AttributeError):
            setattr(read, field, value)
    with pytest.raises(AttributeError):
        read.extra = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        hash(read)
    assert read.to_json() == ChatMessage.text("user", "hi").to_json()


def test_changing_a_read_message_s_dicts_changes_that_message_alone() -> None:
    # As with any message: its blocks and additional_kwargs are its own dicts.
    rows = [row(ChatMessage.text("user", "hi"))] * 2
    first, second = decode_bodies(rows)
    first.additional_kwargs["note"] = 1
    first.blocks[0]["text"] = "changed"
    assert first.to_json() == ChatMessage.text("user", "changed", note=1).to_json()
    assert first.content == "changed"
    assert second == ChatMessage.text("user", "hi") and second.to_json() == body_json(*rows[0])


def test_bodies_of_every_role_and_of_old_stores_read_alike() -> None:
    # Stores written before plain bodies hold canonical JSON for every message.
    for role in ("system", "developer", "user", "assistant", "function", "tool", "chatbot",
                 "model"):  # fmt: skip
        m = ChatMessage.text(role, '{"not": "json"} "quoted"')
        r, body = row(m)
        assert body == '"{\\"not\\": \\"json\\"} \\"quoted\\""'
        assert decode_body(r, body) == decode_body(r, m.to_json()) == m
        assert body_json(r, m.to_json()) == body_json(r, body) == m.to_json()


def test_a_message_built_directly_takes_its_fields() -> None:
    blocks: Any = [{"block_type": "text", "text": "a"}]
    m = ChatMessage("user", blocks)
    assert m.blocks == ({"block_type": "text", "text": "a"},) and m.additional_kwargs == {}
    assert m == ChatMessage.text("user", "a") and m.content == "a"


def test_a_text_message_encodes_as_the_json_module_encodes_it_at_every_code_point() -> None:
    """A text's JSON string is orjson's (messages.py): the json module's bytes for every
    Unicode scalar value, each escape included, so a stored record and its hash do not
    depend on which of the two made it."""
    canonical = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))
    scalar_values = [c for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]
    for start in range(0, len(scalar_values), 4096):
        text = "".join(map(chr, scalar_values[start : start + 4096]))
        for role, content in (("user", text), ("tool", f'"{text}\\')):
            message = ChatMessage.text(role, content)
            expected = {"role": role, "blocks": [{"block_type": "text", "text": content}],
                        "additional_kwargs": {}}  # fmt: skip
            assert message.to_json() == canonical.encode(expected)
            assert ChatMessage.from_valid(expected).to_json() == canonical.encode(expected)


def test_an_unchecked_message_with_a_lone_surrogate_encodes_as_before() -> None:
    message = ChatMessage("user", [{"block_type": "text", "text": "a\ud800b"}])
    assert message.to_json() == json.dumps(
        {"role": "user", "blocks": [{"block_type": "text", "text": "a\ud800b"}],
         "additional_kwargs": {}}, ensure_ascii=False, separators=(",", ":"),
    )  # fmt: skip
