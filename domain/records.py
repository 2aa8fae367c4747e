"""The stored record of an event: the library's mapper, with a write's messages encoded
once and the rest of the record written field by field.

A put already has each message's canonical JSON (the views store it). That text is what
the library's JSON transcoder writes for the message, so the record of an event that
carries messages puts those texts in place of encoding the messages again. The other
fields of a write's events are short strings, numbers, None and the timestamp; each is
written as the transcoder writes it (the timestamp through the transcoder's own
transcoding of datetimes), without the encoder's call back into Python for the
timestamp. The bytes are the library mapper's (a test compares them); an event with
any other field value takes the library's path.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from datetime import datetime
from json.encoder import encode_basestring
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Mapper, StoredEvent
from eventsourcing.utils import get_topic

_ID_FIELDS = frozenset({"originator_id", "originator_version"})


class LedgerMapper(Mapper[uuid.UUID]):
    """`Mapper`, taking the canonical JSON of an event's messages when the writer has it."""

    def to_stored_event(self, domain_event: Any, bodies: Sequence[str] = ()) -> StoredEvent:
        """The record of `domain_event`; `bodies`: the canonical JSON of its `messages`,
        one text each (anything else is ignored, and the messages encoded here)."""
        state = self._state_json(domain_event, bodies)
        if state is None:
            return super().to_stored_event(domain_event)
        stored = state.encode()
        if self.compressor:
            stored = self.compressor.compress(stored)
        if self.cipher:
            stored = self.cipher.encrypt(stored)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=_record_class(domain_event.__class__)[0],
            state=stored,
        )

    def _state_json(self, domain_event: Any, bodies: Sequence[str]) -> str | None:
        """The transcoder's JSON of the event's state, or None where this cannot write it
        (a field of another type, or no texts for its messages)."""
        transcoder = self.transcoder
        if type(transcoder) is not JSONTranscoder:
            return None
        fields = vars(domain_event)
        messages = fields.get("messages")
        if messages is not None and len(messages) != len(bodies):
            return None
        parts = []
        for name, value in fields.items():
            if name in _ID_FIELDS:  # the record's columns, not its state
                continue
            kind = type(value)
            if kind is str:
                text = encode_basestring(value)
            elif value is None:
                text = "null"
            elif kind is int:
                text = int.__repr__(value)
            elif name == "messages":
                text = f"[{','.join(bodies)}]"
            elif kind is datetime:
                moment = _datetime_json(transcoder, value)
                if moment is None:
                    return None
                text = moment
            else:
                return None
            parts.append(f'"{name}":{text}')
        _, class_version = _record_class(domain_event.__class__)
        if class_version > 1:  # as the library's mapper writes it
            parts.append(f'"class_version":{class_version}')
        return "{" + ",".join(parts) + "}"


def _datetime_json(transcoder: JSONTranscoder, value: datetime) -> str | None:
    """A datetime as the transcoder writes it: its registered transcoding's name and data."""
    transcoding = transcoder.types.get(datetime)
    if transcoding is None:
        return None
    data = transcoding.encode(value)
    if type(data) is not str:
        return None
    return f'{{"_type_":{encode_basestring(transcoding.name)},"_data_":{encode_basestring(data)}}}'


@functools.cache
def _record_class(event_class: Any) -> tuple[str, int]:
    """The topic and class version the library records for events of `event_class` (its
    mapper looks them up on every event; an event class without a class version raised
    and caught an AttributeError each time)."""
    return get_topic(event_class), getattr(event_class, "class_version", 1)
