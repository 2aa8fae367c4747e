"""A Server-Sent Events reader for the tests: a thread reads the stream into a queue, so a
test waits for events with a deadline."""

from __future__ import annotations

import json
import queue
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx


@dataclass
class Message:
    id: str | None
    event: str | None
    data: dict[str, Any] | None
    comment: str | None = None


class Tail:
    def __init__(self, base_url: str, path: str, api_key: str, last_event_id: str | None = None):
        headers = {"Authorization": f"Bearer {api_key}", "Accept": "text/event-stream"}
        if last_event_id is not None:
            headers["Last-Event-ID"] = last_event_id
        self._client = httpx.Client(base_url=base_url, headers=headers, timeout=None)
        self._context = self._client.stream("GET", path)
        self.response = self._context.__enter__()
        self.messages: queue.Queue[Message] = queue.Queue()
        self.last_event_id = last_event_id
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        fields: dict[str, str] = {}
        try:
            for line in self.response.iter_lines():
                if line.startswith(":"):
                    self.messages.put(Message(None, None, None, comment=line[1:].strip()))
                elif line:
                    name, _, value = line.partition(": ")
                    fields[name] = value
                elif fields:
                    data = json.loads(fields["data"]) if "data" in fields else None
                    if "id" in fields:
                        self.last_event_id = fields["id"]  # as a browser's EventSource
                    if data is None and "event" not in fields:  # moves the id only
                        self.messages.put(Message(fields.get("id"), None, None, comment="id"))
                    else:
                        self.messages.put(Message(fields.get("id"), fields.get("event"), data))
                    fields = {}
        except httpx.HTTPError:
            return  # closed by the test

    def events(self, n: int, timeout: float = 30) -> list[Message]:
        """The next `n` events (comments skipped), or fail after `timeout` seconds."""
        got: list[Message] = []
        deadline = time.monotonic() + timeout
        while len(got) < n:
            left = deadline - time.monotonic()
            assert left > 0, f"only {len(got)} of {n} events arrived: {got}"
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                continue
            if message.comment is None:
                got.append(message)
        return got

    def comments(self, timeout: float) -> list[str]:
        """Comment lines that arrive within `timeout` seconds (events fail the test)."""
        found: list[str] = []
        deadline = time.monotonic() + timeout
        while (left := deadline - time.monotonic()) > 0:
            try:
                message = self.messages.get(timeout=left)
            except queue.Empty:
                break
            assert message.comment is not None, f"unexpected event {message}"
            found.append(message.comment)
        return found

    def close(self) -> None:
        self._context.__exit__(None, None, None)
        self._client.close()

    def ended(self, timeout: float) -> bool:
        """Whether the server ended the stream within `timeout` seconds."""
        self._thread.join(timeout)
        return not self._thread.is_alive()
