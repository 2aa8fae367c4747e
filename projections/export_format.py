"""The lines of a JSONL export, as the writer (`export.py`) makes them and the offline
checker (`export_verify.py`) expects them: the format's names, the readable part of an
event line, and the compact JSON every line is written in. Standard library only."""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from decimal import Decimal
from typing import Any

FORMAT = "session-ledger-export"
FORMAT_VERSION = 1
CHAIN = "sha256-v1"  # the encoding of domain/integrity.py
# Fields of every event that the line carries beside its payload, or that say nothing
# about the change itself.
ENVELOPE = frozenset({
    "timestamp", "originator_id", "originator_version", "originator_topic", "class_version",
    "actor", "reason", "idempotency_key", "request_digest",
})  # fmt: skip
# JSON leaves these unescaped, but str.splitlines() and some tools break lines on them.
LINE_BREAKS = ("\u2028", "\u2029", "\x85")


def readable(topic: str, fields: Mapping[str, Any]) -> dict[str, Any]:
    """The human part of an event line, from the stored record's decoded state."""
    timestamp = fields["timestamp"]
    return {
        "type": topic.partition(":")[2].rsplit(".", 1)[-1],
        "recorded_at": utc(timestamp) if isinstance(timestamp, datetime) else timestamp,
        "actor": fields.get("actor"),
        "reason": fields.get("reason"),
        "idempotency_key": fields.get("idempotency_key"),
        "payload": {k: v for k, v in fields.items() if k not in ENVELOPE},
    }


def utc(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat()


def _plain(value: object) -> object:
    if isinstance(value, datetime):
        return utc(value)
    if isinstance(value, uuid.UUID | Decimal):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


def json_text(value: object, default: Callable[[object], object] = _plain) -> str:
    """Compact JSON of an export line, with the line breaks JSON leaves raw escaped."""
    text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=default,
                      allow_nan=False)  # fmt: skip
    for char in LINE_BREAKS:
        text = text.replace(char, f"\\u{ord(char):04x}")
    return text


def line(value: object) -> bytes:
    return json_text(value).encode("utf-8") + b"\n"
