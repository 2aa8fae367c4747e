"""A large write's JSON body is decoded in parts (api/large_bodies.py): the value and the
errors of `json.loads`, each message by a call of its own."""

from __future__ import annotations

import json
from typing import Any

import pytest

from session_ledger.api import large_bodies
from session_ledger.api.large_bodies import decode_in_parts
from session_ledger.projections import strict_json

BODIES = [
    b'{"messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "x"}]}',
    b' \n{ "messages" :[ ] ,"n":1,"a":{"b":[1,2]},"m":2 }\r\n',
    b'{"messages":[[1,{"k":"\\u00e9\\ud83d\\ude00"}],null,true,1.5e3,-0]}',
    b"{}",
    b"[1, 2]",
    b'"text"',
    '\ufeff{"a": 1}'.encode(),  # a UTF-8 byte order mark, which json.loads(bytes) allows
    '{"a": "\u00e9"}'.encode("utf-16"),
    b'{"a": NaN, "b": [Infinity]}',
]
INVALID = [
    b"",
    b"{",
    b'{"messages": [1,]}',
    b'{"messages": [1 2]}',
    b'{"a" 1}',
    b'{"a": 1,}',
    b"{,}",
    b'{"a": 1} x',
    b'{"a": 1}}',
    b'{"a": [1, 2}',
    b"\xff{}",
]


@pytest.mark.parametrize("body", BODIES)
def test_the_value_of_json_loads(body: bytes) -> None:
    assert repr(decode_in_parts(body)) == repr(json.loads(body))


@pytest.mark.parametrize(
    "body",
    [b'{"messages": [], "n": 1, "n": 2}', b'{"messages": [{"role": "user", "role": "tool"}]}',
     b'{"messages": [], "a": {"b": 1, "b": 2}}', b'[{"a": 1, "a": 2}]'],
)  # fmt: skip
def test_a_key_repeated_in_any_object_is_refused(body: bytes) -> None:
    """Where json.loads keeps the last value (strict_json: which one was meant?)."""
    with pytest.raises(strict_json.RepeatedKey):
        decode_in_parts(body)


@pytest.mark.parametrize("body", INVALID)
def test_the_error_of_json_loads(body: bytes) -> None:
    with pytest.raises(ValueError) as expected:
        json.loads(body)
    with pytest.raises(type(expected.value)) as got:
        decode_in_parts(body)
    assert str(got.value) == str(expected.value)


def test_each_message_is_decoded_by_a_call_of_its_own(monkeypatch: pytest.MonkeyPatch) -> None:
    """json's decoder holds the GIL for the whole of a call: 7 messages of 4 MiB in one
    call held every other thread of the server for 50-90 ms."""
    content = "x" * 100_000
    body = json.dumps({"messages": [{"role": "user", "content": content}] * 7}).encode()
    spans: list[int] = []

    class Counting(json.JSONDecoder):
        def raw_decode(self, s: str, idx: int = 0) -> tuple[Any, int]:
            value, end = super().raw_decode(s, idx)
            spans.append(end - idx)
            return value, end

    monkeypatch.setattr(large_bodies, "_DECODER", Counting())
    assert decode_in_parts(body) == json.loads(body)
    assert len(spans) == 8  # the key, then each message
    assert max(spans) < len(content) + 100
