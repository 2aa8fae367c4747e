"""What a benchmarked store must offer: one class per system, all driven the same way."""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .corpus import Message


@dataclass(frozen=True)
class Context:
    """Where stores may put their data for one run."""

    workdir: Path  # SQLite files and JSON files (on a real disk: fsync must cost)
    postgres_url: str | None  # a scratch database of this run, None when unreachable
    window_rows: int  # rows the raw tail SELECT reads: ChatMemoryBuffer's window size


class Store(ABC):
    """One system under test. Every call that writes must be durable when it returns."""

    name: str = ""
    group: str = "peer"  # "ours", "raw" (the database's own limit) or "peer"
    backend: str = ""  # "memory", "sqlite", "postgres" or "file": what ratios pair on
    concurrent = True  # can W1x4 run it from 4 threads (each via writer())?
    window_note = ""  # how its W3 window differs, if it does
    history_note = ""  # how its reads differ, if they do
    reads_process_memory = False  # W4 then reads a dict, not a store: no peer for it
    keeps_versions = False  # W5 (point-in-time reads) runs only where this is true

    @abstractmethod
    def open(self, ctx: Context) -> None:
        """Create tables or files; called once per run."""

    def native(self, message: Message) -> Any:
        """Convert a plain message to what append() takes (outside the timed region)."""
        return message

    @abstractmethod
    def append(self, session: str, message: Any) -> None:
        """Store one message with one durable call, as a user of this system would."""

    def writer(self) -> Store:
        """A handle one W1x4 thread appends through (its own connection where needed)."""
        return self

    def release_writer(self, writer: Store) -> None:
        """Give back what writer() took."""
        return None

    def load(self, session: str, messages: list[Any]) -> None:
        """Fill a history quickly for the read workloads (not timed)."""
        for message in messages:
            self.append(session, message)

    @abstractmethod
    def window(self, session: str) -> int:
        """W3: the context window of at most 4,000 tokens; returns its message count."""

    @abstractmethod
    def history(self, session: str) -> int:
        """W4: the whole active history, decoded; returns its message count."""

    def load_versions(self, session: str, messages: list[Any], per_write: int) -> int:
        """A history written `per_write` messages at a time; returns its last version."""
        raise NotImplementedError(f"{self.name} keeps no past versions")

    def window_at(self, session: str, version: int) -> int:
        """W5: the context window as it was at `version`; only stores that keep versions."""
        raise NotImplementedError(f"{self.name} keeps no past versions")

    def history_at(self, session: str, version: int) -> int:
        """W5: the whole history as it was at `version`."""
        raise NotImplementedError(f"{self.name} keeps no past versions")

    def close(self) -> None:
        """Release connections and remove what open() made."""
        return None
