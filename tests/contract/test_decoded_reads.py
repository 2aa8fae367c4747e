"""`MessagesRead.decoded(text, whole)`: a read's messages made by the caller, no
`ChatMessage` between (what `LedgerSession` makes its items with): `text(role, text)` for
a message of one text block and nothing else, `whole(d)` for any other, `d` equal to its
`to_dict()`. The same messages as `messages()`, on memory, SQLite and PostgreSQL."""

from __future__ import annotations

import json
from typing import Any

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ChatMessage

MESSAGES: list[dict[str, Any]] = [
    {"role": "user", "content": "plain"},
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "nul \x00 and é 😀"},
    {"role": "tool", "content": "out", "additional_kwargs": {"tool_call_id": "c1"}},
    {
        "role": "assistant",
        "blocks": [{"block_type": "text", "text": "a"}, {"block_type": "text", "text": "b"}],
    },
    {"role": "user", "blocks": []},
]


def made(message: ChatMessage) -> tuple[Any, ...]:
    """What `decoded` should make of `message`."""
    d = message.to_dict()
    plain = len(d["blocks"]) == 1 and d["blocks"][0]["block_type"] == "text"
    if plain and not d["additional_kwargs"] and set(d["blocks"][0]) == {"block_type", "text"}:
        return ("text", d["role"], d["blocks"][0]["text"])
    return ("whole", d)


def test_decoded_makes_what_messages_hold(ledger: Ledger) -> None:
    first_version = ledger.put_messages("s", MESSAGES).version
    ledger.put_messages("s", [{"role": "user", "content": f"m{i}"} for i in range(300)])

    def text(role: str, words: str) -> tuple[Any, ...]:
        return ("text", role, words)

    def whole(d: dict[str, Any]) -> tuple[Any, ...]:
        return ("whole", d)

    for read in (
        ledger.history("s"),
        ledger.history("s", last=3),
        ledger.history("s", offset=2, limit=5),
        ledger.history("s", as_of_version=first_version),
        ledger.history("nobody"),
    ):
        assert read.decoded(text, whole) == [made(m) for m in read.messages()]
    first = ledger.history("s", as_of_version=first_version).decoded(text, whole)
    assert [kind for kind, *_ in first] == ["text", "text", "text", "whole", "whole", "whole"]


def test_dicts_are_the_stored_json_decoded(ledger: Ledger) -> None:
    """`dicts()`: each message's `to_dict()`, keys in the canonical JSON's order (an
    answer made of them is the same text as one made of `json()`)."""
    ledger.put_messages("s", MESSAGES)
    for read in (ledger.history("s"), ledger.window("s", token_limit=10**6)):
        decoded = [json.loads(text) for text in read.json()]
        assert read.dicts() == decoded == [m.to_dict() for m in read.messages()]
        assert [json.dumps(d) for d in read.dicts()] == [json.dumps(d) for d in decoded]
