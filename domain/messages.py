"""The chat message value object: LlamaIndex's roles and content blocks, kept losslessly.

Reads LlamaIndex's JSON shape (`{"role", "blocks", "additional_kwargs"}`) and the plain
one (`{"role", "content"}`), and writes one canonical shape: LlamaIndex's. Anything
that is not valid JSON text (lone surrogates, NaN, non-string keys) is refused here, so
every store can hold exactly what it was given.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from operator import attrgetter
from typing import Any

import orjson
from pydantic_core import from_json as _decode

from .errors import SHOWN_CHARS, InvalidMessage, shown

ROLES = ("system", "developer", "user", "assistant", "function", "tool", "chatbot", "model")


def _plain_role(role: object) -> object:
    """A role given as a `str` subclass equal to one of `ROLES` (LlamaIndex's `MessageRole`,
    as `model_dump()` leaves it) as that plain string; any other value as it is."""
    return ROLES[ROLES.index(role)] if isinstance(role, str) and role in ROLES else role


BLOCK_TYPES = (
    "text", "image", "audio", "video", "document", "cache",
    "citable", "citation", "thinking", "tool_call",
)  # fmt: skip
MAX_NESTING = 64
_FIELDS = frozenset({"role", "content", "blocks", "additional_kwargs"})
# One encoder for the canonical form: `json.dumps` with options builds a new one per call.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def _encode_text(text: str) -> str:
    """`_CANONICAL.encode(text)` of a string, the text of most messages and most of what
    a put encodes: orjson's bytes, which equal the json module's for every string of
    valid Unicode (`tests/unit/test_message_json.py` holds them to every code point)
    at a third of its cost. A lone surrogate (only an unchecked message holds one) is
    the json module's to encode."""
    try:
        return orjson.dumps(text).decode("utf-8")
    except orjson.JSONEncodeError:
        return _CANONICAL.encode(text)


def canonical_json(value: Any) -> str:
    """The canonical encoding of a stored message: compact UTF-8 text, control
    characters escaped, keys in the order given."""
    return _CANONICAL.encode(value)


# The canonical JSON of a message of one text block and no additional_kwargs (most
# messages) is its text's JSON string between these two (a role needs no escapes).
_TEXT_HEAD = {role: f'{{"role":"{role}","blocks":[{{"block_type":"text","text":' for role in ROLES}
_TEXT_TAIL = '}],"additional_kwargs":{}}'


def text_message_json(role: str, text_json: str) -> str:
    """The canonical JSON of a message of `role` with one text block whose text's JSON
    string is `text_json`, and no additional_kwargs."""
    return _TEXT_HEAD[role] + text_json + _TEXT_TAIL


def text_message_dict(role: str, text: str) -> dict[str, Any]:
    """`to_dict()` of a message of `role` with one text block, `text`, and no
    additional_kwargs (its keys in the canonical JSON's order)."""
    return {"role": role, "blocks": [{"block_type": "text", "text": text}],
            "additional_kwargs": {}}  # fmt: skip


_TEXT_HEAD_CHARS = {role: len(head) for role, head in _TEXT_HEAD.items()}


def text_json_of(role: str, message_json: str) -> str:
    """The JSON string of the text of a message of `role` with one text block and no
    additional_kwargs, cut from its canonical JSON `message_json` (not encoded again)."""
    return message_json[_TEXT_HEAD_CHARS[role] : -len(_TEXT_TAIL)]


def plain_text(message: Mapping[str, Any]) -> str | None:
    """The text of a valid message's dict when it is one text block and nothing else (no
    other block key, no additional_kwargs), else None."""
    return None if message["additional_kwargs"] else _block_text(message["blocks"])


def _block_text(blocks: Sequence[dict[str, Any]]) -> str | None:
    """The text of valid blocks that are one text block with no other key, else None."""
    if len(blocks) != 1:
        return None
    block = blocks[0]
    text = block.get("text")
    if len(block) == 2 and block.get("block_type") == "text" and type(text) is str:
        # (key order matters to the canonical form: `block_type` first)
        return text if next(iter(block)) == "block_type" else None
    return None


class EncodedMessages(list[dict[str, Any]]):
    """The dicts of a write's messages (what its event holds) with their canonical JSON
    array as UTF-8 (`json`), made once when they were parsed: the store's mapper writes
    those bytes into the event's record, where encoding the dicts again would give the
    same bytes (the library's transcoder encodes with `canonical_json`'s options)."""

    __slots__ = ("json",)

    def __init__(self, dicts: list[dict[str, Any]], encoded: Sequence[bytes]) -> None:
        super().__init__(dicts)
        self.json = b"[" + b",".join(encoded) + b"]"


class ChatMessage:
    """One message of a conversation: a role, content blocks and extra keyword data.

    A value like a frozen dataclass of those three fields (compared, copied and pickled
    by them; the fields have no setters). A message made by `of_text` makes its one text
    block and its empty additional_kwargs when they are first asked for."""

    __slots__ = ("_blocks", "_kwargs", "_role", "_text")
    __match_args__ = ("role", "blocks", "additional_kwargs")
    __hash__ = None  # type: ignore[assignment]  # (unhashable: its dicts are mutable)

    def __init__(
        self,
        role: str,
        blocks: Sequence[dict[str, Any]] = (),
        additional_kwargs: dict[str, Any] | None = None,
    ) -> None:
        """The fields as given (unchecked: `parse` validates)."""
        self._role = role
        self._text: str | None = None
        self._blocks: tuple[dict[str, Any], ...] | None = tuple(blocks)
        self._kwargs: dict[str, Any] | None = {} if additional_kwargs is None else additional_kwargs

    role = property(attrgetter("_role"), doc="The speaker: one of `ROLES`.")

    @property
    def blocks(self) -> tuple[dict[str, Any], ...]:
        """The content blocks, each a dict with its `block_type`."""
        blocks = self._blocks
        if blocks is None:
            blocks = self._blocks = ({"block_type": "text", "text": self._text},)
        return blocks

    @property
    def additional_kwargs(self) -> dict[str, Any]:
        """Extra keyword data (tool call ids and the like)."""
        kwargs = self._kwargs
        if kwargs is None:
            kwargs = self._kwargs = {}
        return kwargs

    @classmethod
    def text(cls, role: str, text: str, **additional_kwargs: Any) -> ChatMessage:
        """A message with one text block."""
        return cls.parse({"role": role, "content": text, "additional_kwargs": additional_kwargs})

    @classmethod
    def parse(cls, obj: object) -> ChatMessage:
        """Validate a message in LlamaIndex's JSON shape or the plain `{role, content}` one."""
        if isinstance(obj, ChatMessage):
            return obj
        # (`type(x) is dict` first: a check against an abstract class costs more, and a
        # put parses every message.)
        if not (type(obj) is dict or isinstance(obj, Mapping)):
            raise InvalidMessage(f"a message must be an object, not {type(obj).__name__}")
        if not _FIELDS.issuperset(obj):
            unknown = set(obj) - _FIELDS
            names = ", ".join(n if len(n) <= SHOWN_CHARS else shown(n)
                              for n in sorted(map(str, unknown))[:5])  # fmt: skip
            raise InvalidMessage(f"unknown message fields: {names}")
        role = obj.get("role")
        if type(role) is not str:
            role = _plain_role(role)
        if role not in ROLES:
            raise InvalidMessage(f"role must be one of {', '.join(ROLES)}; got {shown(role)}")
        if "content" in obj and "blocks" in obj:
            raise InvalidMessage("give either 'content' or 'blocks', not both")
        blocks = _parse_content(obj["content"]) if "content" in obj else obj.get("blocks", [])
        if type(blocks) is not list and (
            not isinstance(blocks, Sequence) or isinstance(blocks, str | bytes)
        ):
            raise InvalidMessage("'blocks' must be a list of content blocks")
        kwargs = obj.get("additional_kwargs")
        kwargs = {} if kwargs is None else kwargs
        if not (type(kwargs) is dict or isinstance(kwargs, Mapping)):
            raise InvalidMessage("'additional_kwargs' must be an object")
        return cls.from_valid(
            {
                "role": role,
                "blocks": [_parse_block(b, i) for i, b in enumerate(blocks)],
                "additional_kwargs": _json_value(kwargs, "additional_kwargs", 0),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> ChatMessage:
        """Rebuild a message from `to_json()` output (already validated when stored)."""
        return cls.from_valid(_decode(text))

    @classmethod
    def of_text(cls, role: str, text: str) -> ChatMessage:
        """A message of one text block and no additional_kwargs, unchecked (for a store's
        reads of what `parse` validated): its block and dict are made when first asked for,
        so a history read makes the message and its text, not six objects a message."""
        message = object.__new__(cls)
        message._role, message._text = role, text
        message._blocks = message._kwargs = None
        return message

    @classmethod
    def from_valid(cls, d: dict[str, Any]) -> ChatMessage:
        """A message from the dict of a valid one (what `to_dict` or a store gives back),
        its fields taken as they are."""
        message = object.__new__(cls)
        message._role, message._text = d["role"], None
        message._blocks, message._kwargs = tuple(d["blocks"]), d["additional_kwargs"]
        return message

    def to_dict(self) -> dict[str, Any]:
        """LlamaIndex's JSON shape; a fresh copy the caller may change."""
        return json.loads(self.to_json())  # type: ignore[no-any-return]

    def to_json(self) -> str:
        """The canonical encoding: compact, UTF-8 text, control characters escaped."""
        return self.encoded()[0]

    def encoded(self) -> tuple[str, str | None]:
        """`to_json()`, and `content` where the message is one text block and no
        additional_kwargs (its text, found once for both), else None."""
        blocks = self._blocks
        if not self._kwargs:
            text = self._text if blocks is None else _block_text(blocks)
            if text is not None:  # one text block: its text's JSON string, framed
                return text_message_json(self._role, _encode_text(text)), text
        return _CANONICAL.encode(
            {"role": self._role, "blocks": self.blocks, "additional_kwargs": self.additional_kwargs}
        ), None

    @property
    def content(self) -> str | None:
        """Text blocks joined by newlines, as LlamaIndex's `ChatMessage.content`."""
        if self._blocks is None:
            return self._text
        texts = [b["text"] for b in self._blocks if b.get("block_type") == "text"]
        joined = "\n".join(texts)
        if joined:
            return joined
        return "" if len(texts) == 1 else None

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        assert isinstance(other, ChatMessage)
        if self._blocks is None and other._blocks is None:  # two texts as read
            return (self._role, self._text, self._kwargs or {}) == (
                other._role, other._text, other._kwargs or {}
            )  # fmt: skip
        return (self._role, self.blocks, self._kwargs or {}) == (
            other._role, other.blocks, other._kwargs or {}
        )  # fmt: skip

    def __repr__(self) -> str:
        return (
            f"{type(self).__qualname__}(role={self._role!r}, blocks={self.blocks!r}, "
            f"additional_kwargs={self.additional_kwargs!r})"
        )

    def __reduce__(self) -> tuple[Any, ...]:
        return type(self), (self._role, self.blocks, self.additional_kwargs)


def _parse_content(content: object) -> object:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"block_type": "text", "text": content}]
    if isinstance(content, list | tuple):
        return content
    raise InvalidMessage(
        f"'content' must be a string, a list of content blocks or null; got "
        f"{type(content).__name__}"
    )


def _parse_block(block: object, index: int) -> dict[str, Any]:
    if not (type(block) is dict or isinstance(block, Mapping)):
        raise InvalidMessage(f"blocks[{index}] must be an object")
    block_type = block.get("block_type")
    if block_type not in BLOCK_TYPES:
        raise InvalidMessage(
            f"blocks[{index}].block_type must be one of {', '.join(BLOCK_TYPES)}; "
            f"got {shown(block_type)}"
        )
    if block_type == "text" and not isinstance(block.get("text"), str):
        raise InvalidMessage(f"blocks[{index}].text must be a string")
    return _json_value(block, ("blocks", index), 0)  # type: ignore[no-any-return]


# Where a value sits in a message: a name, or (where its container sits, key or index).
# Spelled out ("blocks[0].text") only in an error: a valid message builds no names.
Place = str | tuple[Any, str | int]


def _place(where: Place) -> str:
    if isinstance(where, str):
        return where
    parent, key = where
    if isinstance(key, int):
        return f"{_place(parent)}[{key}]"
    return f"{_place(parent)}.{key if len(key) <= SHOWN_CHARS else shown(key)}"


def _json_value(value: Any, where: Place, depth: int) -> Any:
    """A deep copy of `value` if it is plain JSON; InvalidMessage naming the place if not."""
    if depth > MAX_NESTING:
        raise InvalidMessage(f"{_place(where)} is nested deeper than {MAX_NESTING} levels")
    kind = type(value)
    if kind not in _JSON_KINDS:  # a subclass (or no JSON at all): its JSON kind, by isinstance
        kind = next((k for k, abc in _JSON_BASES if isinstance(value, abc)), kind)
    if value is None or kind is bool or kind is int:
        return value
    if kind is str:
        _check_text(value, where)
        return value
    if kind is float:
        if not math.isfinite(value):
            raise InvalidMessage(f"{_place(where)} is {value}, which JSON cannot hold")
        return value
    if kind is dict:
        out: dict[str, Any] = {}
        for k, v in value.items():
            if not isinstance(k, str):
                raise InvalidMessage(f"{_place(where)} has a non-string key {shown(k)}")
            _check_text(k, where)
            out[k] = _json_value(v, (where, k), depth + 1)
        return out
    if kind is list:
        return [_json_value(v, (where, i), depth + 1) for i, v in enumerate(value)]
    raise InvalidMessage(f"{_place(where)} holds a {kind.__name__}, which is not JSON")


# The JSON kinds by exact type (a put's values), and what a value of another type counts
# as: the first base it is an instance of (str before Mapping, int covers bool).
_JSON_KINDS = frozenset({str, bool, int, float, dict, list})
_JSON_BASES: tuple[tuple[type, Any], ...] = (
    (str, str), (int, int), (float, float), (dict, Mapping), (list, list | tuple),
)  # fmt: skip


def _check_text(text: str, where: Place) -> None:
    if text.isascii():  # (a flag of the string: no scan) ASCII has no surrogates
        return
    try:
        text.encode("utf-8")
    except UnicodeEncodeError as e:
        raise InvalidMessage(
            f"{_place(where)} contains a lone surrogate (U+{ord(text[e.start]):04X}) at offset "
            f"{e.start}; text must be valid Unicode"
        ) from None
