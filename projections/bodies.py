"""How a message is kept in a view row, and how rows are read back.

A message row holds its role and a body. The body of a message of one text block and no
additional_kwargs (most messages) is the JSON string of its text alone (`"..."`); any
other message's body is its canonical JSON (`{...}`). A read makes a text message from
its role and text (three objects, not six), and a server answers with canonical JSON
made from the body without decoding it.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from pydantic_core import from_json as _decode

from session_ledger.domain.messages import (
    ChatMessage,
    plain_text,
    text_json_of,
    text_message_dict,
    text_message_json,
)

T = TypeVar("T")

# Characters per decode of many: the joined text of a chunk stays in the CPU's caches
# (chunks of 1,024 messages of 4 KB decoded 1.5x slower than chunks of 64 KB).
DECODE_CHUNK_CHARS = 65536


def stored_body(message: Mapping[str, Any], encoded: str) -> str:
    """The body kept for `message` (a valid message's dict; `encoded` its canonical JSON):
    a plain text's JSON string is cut from `encoded`, not encoded again."""
    return encoded if plain_text(message) is None else text_json_of(message["role"], encoded)


def body_json(role: str, body: str) -> str:
    """The canonical JSON of the message stored as (`role`, `body`)."""
    return text_message_json(role, body) if body[0] == '"' else body


def decode_bodies(rows: Sequence[Sequence[Any]]) -> list[ChatMessage]:
    """The messages of rows that start (role, body) (`decode_as`)."""
    return decode_as(rows, ChatMessage.of_text, ChatMessage.from_valid)


def decode_as(
    rows: Sequence[Sequence[Any]], text: Callable[[str, str], T],
    whole: Callable[[dict[str, Any]], T],
) -> list[T]:  # fmt: skip
    """What `text(role, text)` makes of each text message (one text block, nothing else)
    and `whole(message)` of any other (its dict), of rows that start (role, body), the
    bodies decoded as one JSON array per chunk of about 64 KB: a history of short
    messages decodes in about half the time of one decode per message.

    Stored bodies are valid JSON (no lone surrogates, no NaN: `ChatMessage.parse` refused
    them), so pydantic-core's decoder reads them as `json.loads` would, and faster."""
    out: list[T] = []
    total, start = len(rows), 0
    while start < total:
        end, chars = start, 0
        while end < total and chars < DECODE_CHUNK_CHARS:
            chars += len(rows[end][1])
            end += 1
        chunk = rows[start:end]
        if end - start == 1:  # a long body alone: no copy of it
            values = [_decode(chunk[0][1])]
        else:
            values = _decode("[" + ",".join([row[1] for row in chunk]) + "]")
        for row, value in zip(chunk, values, strict=True):
            out.append(text(row[0], value) if type(value) is str else whole(value))
        start = end
    return out


def body_text(role: str, body: str) -> str:
    """What LlamaIndex counts of the message stored as (`role`, `body`): `str(content)`
    (a plain text's body is its JSON string: decoded, it is the text)."""
    if body[0] == '"':
        text: str = _decode(body)
        return text
    return str(decode_body(role, body).content)


def decode_body(role: str, body: str) -> ChatMessage:
    """The message stored as (`role`, `body`)."""
    (message,) = decode_bodies(((role, body),))
    return message


class StoredMessages:
    """Messages as one read of a view found them, with the session version it read
    (0: the session does not exist). Decoded, or as canonical JSON, on demand."""

    __slots__ = ("next_after", "rows", "version")

    def __init__(
        self, version: int, rows: Sequence[Sequence[Any]], next_after: int | None = None
    ) -> None:
        self.version = version
        self.rows = rows
        self.next_after = next_after  # a page's: the message id the next page starts after

    def messages(self) -> list[ChatMessage]:
        return decode_bodies(self.rows)

    def decoded(
        self, text: Callable[[str, str], T], whole: Callable[[dict[str, Any]], T]
    ) -> list[T]:
        return decode_as(self.rows, text, whole)

    def dicts(self) -> list[dict[str, Any]]:
        return decode_as(self.rows, text_message_dict, _as_decoded)

    def json(self) -> list[str]:
        return [body_json(row[0], row[1]) for row in self.rows]

    def __len__(self) -> int:
        return len(self.rows)


def _as_decoded(message: dict[str, Any]) -> dict[str, Any]:
    return message
