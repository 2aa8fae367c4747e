"""What the ledger accepts: size limits, and the checks of every argument a caller gives.

Each check raises a typed `InvalidInput` (or subclass) naming the argument, before
anything is stored.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, NamedTuple

from .errors import InvalidInput, InvalidMessage, InvalidSessionKey, PayloadTooLarge
from .messages import ChatMessage, EncodedMessages

MAX_KEY_CHARS = 512
MAX_TENANT_CHARS = 128
MAX_IDEMPOTENCY_KEY_CHARS = 256
# The largest count, version or position taken (as the HTTP API's): past it no store's
# integer column holds the number, and no session is that long.
MAX_POSITION = 2**62
MAX_ACTOR_CHARS = 256
MAX_REASON_CHARS = 4096
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f]")
# The bidirectional formatting controls (embeddings, overrides, isolates, marks): each
# changes the order text is shown in, so a key holding one can be made to look like
# another ("Trojan Source", CVE-2021-42574).
BIDI_CONTROLS = re.compile("[\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@dataclass(frozen=True)
class Limits:
    """Sizes beyond which a write is refused whole."""

    max_message_bytes: int = 4 * 1024 * 1024
    max_messages_per_write: int = 10_000
    max_write_bytes: int = 32 * 1024 * 1024
    # Not a refusal: what an answer keeps of the tool outputs and retrieved nodes it was
    # given is cut to this many bytes (api/llamaindex/provenance.py).
    max_provenance_bytes: int = 256 * 1024
    # Not refusals of a write: what one read answers at most. A page of the history ends
    # at this many messages or before these bytes (its first message whatever its size);
    # a context window over these bytes is refused (AnswerTooLarge).
    max_page_messages: int = 1000
    max_answer_bytes: int = 16 * 1024 * 1024


class ParsedMessages(NamedTuple):
    """A write's messages, checked: the values, their dicts (the event's payload, with
    their JSON array: `EncodedMessages`) and their canonical JSON (what the views keep).
    A named tuple: every write makes one, and a frozen dataclass costs more to make."""

    messages: list[ChatMessage]
    dicts: EncodedMessages
    texts: tuple[str, ...]
    # What LlamaIndex counts of each (`ChatMessage.content`): a plain text's found once,
    # as it was encoded.
    contents: tuple[str | None, ...]


def parse_messages(
    messages: Iterable[ChatMessage | Mapping[str, Any]], limits: Limits, *, allow_empty: bool
) -> ParsedMessages:
    """Validate a write's messages (once: `ChatMessage.parse`) against the size limits."""
    if type(messages) is not list and (  # (a list, as most writes give: no ABC checks)
        isinstance(messages, str | bytes | Mapping) or not isinstance(messages, Iterable)
    ):
        raise InvalidInput("messages must be a list of messages")
    parsed = []
    for i, m in enumerate(messages):
        try:
            parsed.append(ChatMessage.parse(m))
        except InvalidMessage as e:
            raise InvalidMessage(f"messages[{i}]: {e}", index=i) from None
    if not parsed and not allow_empty:
        raise InvalidInput("at least one message is required")
    if len(parsed) > limits.max_messages_per_write:
        raise PayloadTooLarge(
            f"{len(parsed)} messages in one write; the limit is {limits.max_messages_per_write}"
        )
    dicts, texts, utf8, contents, total = [], [], [], [], 0
    for i, m in enumerate(parsed):
        encoded, text = m.encoded()
        texts.append(encoded)
        contents.append(m.content if text is None else text)
        data = encoded.encode("utf-8")
        utf8.append(data)
        size = len(data)
        if size > limits.max_message_bytes:
            raise PayloadTooLarge(
                f"message {i} is {size} bytes; the limit is {limits.max_message_bytes}"
            )
        total += size
        dicts.append(
            {"role": m.role, "blocks": list(m.blocks), "additional_kwargs": m.additional_kwargs}
        )
    if total > limits.max_write_bytes:
        raise PayloadTooLarge(f"the write is {total} bytes; the limit is {limits.max_write_bytes}")
    return ParsedMessages(parsed, EncodedMessages(dicts, utf8), tuple(texts), tuple(contents))


def check_int(name: str, value: object, *, least: int | None = None) -> int:
    """`value`, if it is an int (not a bool, which Python counts as one) of at least
    `least`, and, with a `least` (a count, a version or a position), at most
    `MAX_POSITION`; InvalidInput naming `name` otherwise."""
    if (
        not isinstance(value, int)
        or isinstance(value, bool)
        or (least is not None and value < least)
    ):
        kind = {None: "an integer", 0: "a non-negative integer", 1: "a positive integer"}
        wanted = kind.get(least, f"an integer of at least {least}")
        raise InvalidInput(f"{name} must be {wanted}; got {value!r}")
    if least is not None and value > MAX_POSITION:
        raise InvalidInput(f"{name} must be at most 2**62; got {value!r}")
    return value


def check_limit(name: str, value: object, most: int) -> int:
    """An integer from 1 to `most`."""
    if not 1 <= check_int(name, value) <= most:
        raise InvalidInput(f"{name} must be between 1 and {most}; got {value!r}")
    return value  # type: ignore[return-value]


def check_text(
    value: object,
    what: str,
    max_chars: int,
    *,
    error: type[InvalidInput] = InvalidInput,
    allow_empty: bool = False,
    allow_controls: bool = False,
) -> str:
    """A string of at most `max_chars`, valid Unicode, with no NUL (PostgreSQL's text
    columns refuse it: refused on every store) and, unless allowed, no control
    characters."""
    if not isinstance(value, str) or not (value or allow_empty):
        raise error(f"{what} must be a {'' if allow_empty else 'non-empty '}string")
    if len(value) > max_chars:
        raise error(f"{what} is {len(value)} characters; the limit is {max_chars}")
    if not allow_controls and _CONTROLS.search(value):
        raise error(f"{what} must not contain control characters")
    if "\x00" in value:
        raise error(f"{what} must not contain NUL (U+0000)")
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise error(f"{what} contains a lone surrogate; it must be valid Unicode") from None
    return value


def check_key(key: object) -> str:
    if type(key) is str:  # (a key checked once: every write of a session checks it)
        return _checked_key(key)
    return check_text(key, "session key", MAX_KEY_CHARS, error=InvalidSessionKey)


@functools.lru_cache(maxsize=4096)
def _checked_key(key: str) -> str:
    """`key`, checked (an error is raised again each time: only valid keys are kept)."""
    return check_text(key, "session key", MAX_KEY_CHARS, error=InvalidSessionKey)


@functools.lru_cache(maxsize=4096)
def _bidi_in(key: str) -> bool:
    return BIDI_CONTROLS.search(key) is not None


def new_key_refusal(key: str) -> InvalidSessionKey | None:
    """Why a new session may not take `key`, a checked key, or None. Only new sessions:
    one stored under such a key before is read, written and erased as before."""
    if _bidi_in(key):
        return InvalidSessionKey(
            "a new session's key must not contain bidirectional control characters "
            "(U+202A to U+202E, U+2066 to U+2069, U+200E, U+200F, U+061C): they change "
            "the order the key is shown in"
        )
    return None


def check_tenant(tenant: object) -> str:
    return check_text(tenant, "tenant", MAX_TENANT_CHARS, error=InvalidSessionKey)


def check_moment(name: str, value: object) -> datetime:
    """A datetime (naive: UTC) that lies within the years 1 to 9999 in UTC."""
    if not isinstance(value, datetime):
        raise InvalidInput(f"{name} must be a datetime; got {value!r}")
    if value.tzinfo is None:
        return value.replace(tzinfo=UTC)
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise InvalidInput(
            f"{name} {value.isoformat()} lies outside the years 1 to 9999 in UTC"
        ) from None


def check_write_options(
    actor: object, reason: object, expected_version: object, idempotency_key: object
) -> None:
    if actor is not None:
        check_text(actor, "actor", MAX_ACTOR_CHARS)
    if reason is not None:
        check_text(reason, "reason", MAX_REASON_CHARS, allow_controls=True)
    if expected_version is not None:
        check_int("expected_version", expected_version, least=0)
    if idempotency_key is not None:
        check_text(idempotency_key, "idempotency key", MAX_IDEMPOTENCY_KEY_CHARS)


def request_digest(op: str, request: dict[str, Any]) -> str:
    """The digest of a keyed write's request: a key used again for another write is refused."""
    canonical = json.dumps({"op": op, **request}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
