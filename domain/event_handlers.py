"""One concern's handler of each event class: what the views, the audit trail, an export
or the viewer make of an event, one registry per concern.

A handler is found by the event's exact class (the `Session.<Name>` class the library
stores and reads): one dict lookup, never a chain of `isinstance` tests, and an event of a
class the concern has no handler for is an error (`UnhandledEvent`), never a default.
Adding an event type adds its class (session_events.py) and one handler to each registry;
`missing` names the classes a registry lacks, and the tests hold every registry to
`SESSION_EVENTS` (tests/unit/test_event_handlers.py).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Generic, TypeVar

H = TypeVar("H")


class UnhandledEvent(TypeError):
    """An event of a class that a concern has no handler for: a registry is incomplete."""


class EventHandlers(Generic[H]):
    """A concern's handlers, by event class."""

    def __init__(self, concern: str) -> None:
        self.concern = concern
        self._by_class: dict[type, H] = {}
        self._by_name: dict[str, H] = {}

    def on(self, *classes: type) -> Callable[[H], H]:
        """A decorator that makes its function the handler of `classes` (each handled once)."""

        def register(handler: H) -> H:
            for cls in classes:
                if cls in self._by_class:
                    raise ValueError(f"a {self.concern} handler of {cls.__name__} exists")
                self._by_class[cls] = self._by_name[cls.__name__] = handler
            return handler

        return register

    def handler(self, event: Any) -> H:
        """The handler of `event`'s class (UnhandledEvent when there is none)."""
        try:
            return self._by_class[type(event)]
        except KeyError:
            raise UnhandledEvent(f"no {self.concern} handler for {type(event).__name__}") from None

    def by_name(self, name: str) -> H:
        """The handler of the event class called `name` (an event read back as text, as
        an export's lines carry it)."""
        try:
            return self._by_name[name]
        except KeyError:
            raise UnhandledEvent(f"no {self.concern} handler for {name}") from None

    def missing(self, classes: Iterable[type]) -> list[type]:
        """Those of `classes` this concern has no handler for."""
        return [cls for cls in classes if cls not in self._by_class]
