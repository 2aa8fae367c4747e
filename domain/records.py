"""The stored record of an event: the library's mapper, with a write's messages encoded
once.

A put already has each message's canonical JSON (the views store it). That text is what
the library's JSON transcoder writes for the message, so the record of an event that
carries messages is encoded with an empty list in their place and the texts put there:
the same bytes as the library's mapper (a test compares them), one encoding fewer.
"""

from __future__ import annotations

import functools
import uuid
from collections.abc import Sequence
from typing import Any

from eventsourcing.persistence import JSONTranscoder, Mapper, StoredEvent
from eventsourcing.utils import get_topic

_EMPTY_MESSAGES = '"messages":[]'


class LedgerMapper(Mapper[uuid.UUID]):
    """`Mapper`, taking the canonical JSON of an event's messages when the writer has it."""

    def to_stored_event(self, domain_event: Any, bodies: Sequence[str] = ()) -> StoredEvent:
        """The record of `domain_event`; `bodies`: the canonical JSON of its `messages`,
        one text each (anything else is ignored, and the messages encoded here)."""
        messages = vars(domain_event).get("messages")
        transcoder = self.transcoder
        if (
            not bodies
            or messages is None
            or len(messages) != len(bodies)
            or type(transcoder) is not JSONTranscoder
        ):
            return super().to_stored_event(domain_event)
        state = dict(vars(domain_event))
        del state["originator_id"], state["originator_version"]
        state["messages"] = []
        topic, class_version = _record_class(domain_event.__class__)
        if class_version > 1:  # as the library's mapper writes it
            state["class_version"] = class_version
        text = transcoder.encoder.encode(state)
        # The first key after the timestamp's object: no text before it can hold this.
        at = text.index(_EMPTY_MESSAGES) + len(_EMPTY_MESSAGES) - 2
        stored = f"{text[:at]}[{','.join(bodies)}]{text[at + 2 :]}".encode()
        if self.compressor:
            stored = self.compressor.compress(stored)
        if self.cipher:
            stored = self.cipher.encrypt(stored)
        return StoredEvent(
            originator_id=domain_event.originator_id,
            originator_version=domain_event.originator_version,
            topic=topic,
            state=stored,
        )


@functools.cache
def _record_class(event_class: Any) -> tuple[str, int]:
    """The topic and class version the library records for events of `event_class` (its
    mapper looks them up on every event; an event class without a class version raised
    and caught an AttributeError each time)."""
    return get_topic(event_class), getattr(event_class, "class_version", 1)
