"""The stored events' mapper: the library's `Mapper`, writing an event's state as the
library's JSON transcoder writes it, at a fraction of the cost.

A put encodes its messages once (`inputs.parse_messages`: the canonical JSON a view row
keeps, and the UTF-8 the size limits measure, `EncodedMessages`). The library's mapper
would encode them again inside the event's state; this one puts those bytes in their
place. The rest of the state is encoded by orjson when every value is of a kind whose
orjson bytes are the json module's (strings of valid Unicode, None, booleans, integers
within 64 bits; a datetime through the transcoder's own transcoding), else by the
transcoder, with the messages' bytes spliced in where a marker stood. Either way the
record, and the hash chain over it, are byte for byte the library's
(`tests/unit/test_event_mapper.py`). Chosen through the library's `mapper_class`
extension point (`Ledger.construct_mapper`); reading events back is the library's.
"""

from __future__ import annotations

import functools
import json
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from eventsourcing.persistence import (
    DatetimeAsISO,
    JSONTranscoder,
    Mapper,
    StoredEvent,
    Transcoder,
)
from eventsourcing.utils import get_topic

from .messages import EncodedMessages

# What stands for the messages while the transcoder encodes the rest of a state. Its JSON
# holds NUL, which no other field of an event that carries messages can (actors, reasons
# and keys refuse it; the messages it stands for are out of the state): it occurs once.
MARKER = "\x00messages\x00"
_MARKER_JSON = json.dumps(MARKER).encode("utf-8")
# The kinds of value orjson encodes as the library's transcoder does (an int only within
# 64 bits: orjson refuses a larger one). Not floats: orjson writes 1e16 where the json
# module writes 1e+16.
_SAME_BYTES = frozenset({str, type(None), bool, int, datetime, orjson.Fragment})
_OPTIONS = orjson.OPT_PASSTHROUGH_DATETIME | orjson.OPT_PASSTHROUGH_SUBCLASS


def event_state(domain_event: Any) -> tuple[uuid.UUID, int, dict[str, Any]]:
    """An event's originator id, version and the state the library stores for it (its
    attributes but those two, and its class version when above 1), as the library's
    `Mapper.to_stored_event` takes them; the mappers here differ only in how they encode."""
    state = dict(vars(domain_event))
    originator_id = state.pop("originator_id")
    originator_version = state.pop("originator_version")
    class_version = _class_version(domain_event.__class__)
    if class_version > 1:
        state["class_version"] = class_version
    return originator_id, originator_version, state


@functools.cache
def _class_version(event_class: type) -> int:
    """An event class's `class_version` (1 where it has none), found once per class: a
    look-up that fails on a class raises (and formats) an AttributeError inside `getattr`,
    about 2k instructions for each event stored."""
    version: int = getattr(event_class, "class_version", 1)
    return version


class EventMapper(Mapper[uuid.UUID]):
    """`Mapper.to_stored_event`, the messages' bytes as parsed and the rest by orjson
    where its bytes are the transcoder's (see the module)."""

    def __init__(self, transcoder: Transcoder, *args: Any, **kwargs: Any) -> None:
        super().__init__(transcoder, *args, **kwargs)
        # The transcodings of the library's JSON transcoder by type (a datetime's).
        self._transcodings = transcoder.types if isinstance(transcoder, JSONTranscoder) else None

    def to_stored_event(self, domain_event: Any) -> StoredEvent:
        originator_id, originator_version, state = event_state(domain_event)
        messages = state.get("messages")
        if type(messages) is EncodedMessages:
            state["messages"] = orjson.Fragment(messages.json)
        if self._transcodings is not None and self._same_bytes(state):
            stored = orjson.dumps(state, default=self._transcoded, option=_OPTIONS)
        elif type(messages) is EncodedMessages:
            state["messages"] = MARKER
            head, _, tail = self.transcoder.encode(state).partition(_MARKER_JSON)
            stored = head + messages.json + tail
        else:
            stored = self.transcoder.encode(state)
        if self.compressor:
            stored = self.compressor.compress(stored)
        if self.cipher:
            stored = self.cipher.encrypt(stored)
        return StoredEvent(
            originator_id=originator_id,
            originator_version=originator_version,
            topic=get_topic(type(domain_event)),
            state=stored,
        )

    @staticmethod
    def _same_bytes(state: dict[str, Any]) -> bool:
        """Whether orjson encodes every value of `state` as the transcoder would."""
        for value in state.values():
            kind = type(value)
            if kind not in _SAME_BYTES or (kind is int and not -(2**63) <= value < 2**64):
                return False
        return True

    def _transcoded(self, value: Any) -> dict[str, Any]:
        """A datetime as the library's transcoder writes it (its registered transcoding).
        The library's `DatetimeAsISO` writes `isoformat()`, whose text of a UTC datetime
        orjson writes too (`tests/unit/test_event_mapper.py`), at a fifth of the
        instructions (every event's timestamp: about 3k, not 12k, callgrind)."""
        assert self._transcodings is not None
        transcoding = self._transcodings[type(value)]
        if type(transcoding) is DatetimeAsISO and value.tzinfo is UTC:
            return {"_type_": transcoding.name, "_data_": orjson.Fragment(orjson.dumps(value))}
        return {"_type_": transcoding.name, "_data_": transcoding.encode(value)}
