"""The chat message value object: LlamaIndex's roles and content blocks, kept losslessly.

Reads LlamaIndex's JSON shape (`{"role", "blocks", "additional_kwargs"}`) and the plain
one (`{"role", "content"}`), and writes one canonical shape: LlamaIndex's. Anything
that is not valid JSON text (lone surrogates, NaN, non-string keys) is refused here, so
every store can hold exactly what it was given.
"""

from __future__ import annotations

import gc
import json
import math
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pydantic_core import from_json as _decode

from .errors import InvalidMessage

ROLES = ("system", "developer", "user", "assistant", "function", "tool", "chatbot", "model")
BLOCK_TYPES = (
    "text", "image", "audio", "video", "document", "cache",
    "citable", "citation", "thinking", "tool_call",
)  # fmt: skip
MAX_NESTING = 64
_FIELDS = frozenset({"role", "content", "blocks", "additional_kwargs"})
# Characters per decode of many: the joined text of a chunk stays in the CPU's caches
# (chunks of 1,024 messages of 4 KB decoded 1.5x slower than chunks of 64 KB).
_DECODE_CHUNK_CHARS = 65536
# One encoder for the canonical form: `json.dumps` with options builds a new one per call.
_CANONICAL = json.JSONEncoder(ensure_ascii=False, separators=(",", ":"))


def canonical_json(value: Any) -> str:
    """The canonical encoding of a stored message: compact UTF-8 text, control
    characters escaped, keys in the order given."""
    return _CANONICAL.encode(value)


@dataclass(frozen=True)
class ChatMessage:
    """One message of a conversation: a role, content blocks and extra keyword data."""

    role: str
    blocks: tuple[dict[str, Any], ...] = ()
    additional_kwargs: dict[str, Any] = field(default_factory=dict)

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
            raise InvalidMessage(f"unknown message fields: {', '.join(sorted(map(str, unknown)))}")
        role = obj.get("role")
        if role not in ROLES:
            raise InvalidMessage(f"role must be one of {', '.join(ROLES)}; got {role!r}")
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
        return cls._stored(
            {
                "role": str(role),
                "blocks": [_parse_block(b, i) for i, b in enumerate(blocks)],
                "additional_kwargs": _json_value(kwargs, "additional_kwargs", 0),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> ChatMessage:
        """Rebuild a message from `to_json()` output (already validated when stored)."""
        return cls._stored(_decode(text))

    @classmethod
    def many_from_json(cls, texts: Sequence[str]) -> list[ChatMessage]:
        """`from_json` of each text, decoded as one JSON array per chunk of about 64 KB:
        a history of short messages decodes in about half the time of one `json.loads`
        per message, and one of long messages reads each text once more, in cache.

        Stored text is valid JSON (no lone surrogates, no NaN: `parse` refused them), so
        pydantic-core's decoder reads it as `json.loads` would, in two thirds of the time
        (it also makes each repeated key string once)."""
        out: list[ChatMessage] = []
        stored, total, start = cls._stored, len(texts), 0
        with gc_paused():
            while start < total:
                end, chars = start, 0
                while end < total and chars < _DECODE_CHUNK_CHARS:
                    chars += len(texts[end])
                    end += 1
                if end - start == 1:  # a long text alone: no copy of it
                    out.append(stored(_decode(texts[start])))
                else:
                    out.extend(map(stored, _decode("[" + ",".join(texts[start:end]) + "]")))
                start = end
        return out

    @classmethod
    def _stored(cls, d: dict[str, Any]) -> ChatMessage:
        # Stored messages were validated on the way in (and `parse` has just validated
        # its dict), and their JSON has exactly the three fields in field order: the dict
        # becomes the instance's, without the frozen dataclass's per-field setattr calls
        # or a copy.
        message = object.__new__(cls)
        d["blocks"] = tuple(d["blocks"])
        object.__setattr__(message, "__dict__", d)
        return message

    def to_dict(self) -> dict[str, Any]:
        """LlamaIndex's JSON shape; a fresh copy the caller may change."""
        return json.loads(self.to_json())  # type: ignore[no-any-return]

    def to_json(self) -> str:
        """The canonical encoding: compact, UTF-8 text, control characters escaped."""
        return _CANONICAL.encode(
            {"role": self.role, "blocks": self.blocks, "additional_kwargs": self.additional_kwargs}
        )

    @property
    def content(self) -> str | None:
        """Text blocks joined by newlines, as LlamaIndex's `ChatMessage.content`."""
        texts = [b["text"] for b in self.blocks if b.get("block_type") == "text"]
        joined = "\n".join(texts)
        if joined:
            return joined
        return "" if len(texts) == 1 else None


@contextmanager
def gc_paused() -> Iterator[None]:
    """No cyclic garbage collection while a batch of acyclic objects is made: each
    collection the allocations would trigger walks the whole heap, and in a process with
    a large one that doubled the time to decode a long history. Threads that pause it at
    once leave it on if it was on."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


def _parse_content(content: object) -> object:
    if content is None:
        return []
    if isinstance(content, str):
        return [{"block_type": "text", "text": content}]
    return content


def _parse_block(block: object, index: int) -> dict[str, Any]:
    if not (type(block) is dict or isinstance(block, Mapping)):
        raise InvalidMessage(f"blocks[{index}] must be an object")
    block_type = block.get("block_type")
    if block_type not in BLOCK_TYPES:
        raise InvalidMessage(
            f"blocks[{index}].block_type must be one of {', '.join(BLOCK_TYPES)}; "
            f"got {block_type!r}"
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
    return f"{_place(parent)}[{key}]" if isinstance(key, int) else f"{_place(parent)}.{key}"


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
                raise InvalidMessage(f"{_place(where)} has a non-string key {k!r}")
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
