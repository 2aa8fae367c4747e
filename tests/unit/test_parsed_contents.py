"""A write's messages are parsed once: the text of a plain message (one text block, no
additional_kwargs) is found as it is encoded and handed to the token count from there,
so a put derives no message's `content` again; every other message's is its `content`."""

from __future__ import annotations

from typing import Any

import pytest

from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.settings import Settings
from session_ledger.domain.inputs import Limits, parse_messages
from session_ledger.domain.messages import ChatMessage

MESSAGES: list[Any] = [
    ChatMessage.text("user", "plain text"),
    {"role": "assistant", "content": ""},
    {"role": "user", "content": "kw", "additional_kwargs": {"a": 1}},
    {"role": "user", "blocks": [{"block_type": "text", "text": t} for t in "ab"]},
    {"role": "tool", "blocks": []},
    {"role": "user", "blocks": [{"block_type": "image", "url": "https://x/y.png"}]},
]


def test_contents_are_each_messages_content() -> None:
    parsed = parse_messages(MESSAGES, Limits(), allow_empty=False)
    assert parsed.contents == tuple(m.content for m in parsed.messages)
    assert parsed.texts == tuple(m.to_json() for m in parsed.messages)


def test_a_put_reads_no_plain_messages_content(monkeypatch: pytest.MonkeyPatch) -> None:
    read = []
    content = ChatMessage.content

    def counted(self: ChatMessage) -> str | None:
        read.append(self)
        return content.fget(self)  # type: ignore[no-any-return, union-attr]

    ledger = open_ledger(Settings(database_url="memory://"))
    try:
        monkeypatch.setattr(ChatMessage, "content", property(counted))
        ledger.put("k", ChatMessage.text("user", "hello there"))
        ledger.put_messages("k", MESSAGES[:2])
        assert read == []
    finally:
        ledger.close()
