"""Streams: an answer recorded as it is delivered, then completed or aborted.

A stream is part of its session's history: `StreamStarted`, its deltas in batches
(`StreamChunksAppended`: one event per `stream_flush_bytes` or `stream_flush_ms`, not one
per token), then exactly one of `StreamCompleted` (the assembled message enters the
history in the same event, so a read sees it once) or `StreamAborted` (the partial text
stays in the events and the streams view; it enters the history only if the caller keeps
it). Concurrent streams of one session enter the history in the order they complete.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from types import TracebackType
from typing import TYPE_CHECKING, Any, NamedTuple, Protocol

from .addresses import SessionAddresses
from .erasure import Erasures
from .errors import InvalidInput, PayloadTooLarge, StreamConflict
from .inputs import Limits, check_text, parse_messages
from .ports import SessionViews, StreamView, WriteResult
from .session import Session, session_id
from .tuning import Tuning
from .write_loop import WriteLoop

if TYPE_CHECKING:
    from .tokens import TokenCount

CAUSES = ("client_gone", "error", "timeout", "superseded")
MAX_STREAM_ID_CHARS = 128
OPEN = "open"


class OpenedStream(NamedTuple):
    stream_id: str
    result: WriteResult


def check_stream_id(stream_id: str) -> str:
    if not isinstance(stream_id, str) or not 0 < len(stream_id) <= MAX_STREAM_ID_CHARS:
        raise InvalidInput(f"stream_id must be 1 to {MAX_STREAM_ID_CHARS} characters")
    if not stream_id.isprintable():
        raise InvalidInput("stream_id may not hold control characters")
    return stream_id


def check_deltas(deltas: Sequence[str], limits: Limits, *, allow_empty: bool) -> list[str]:
    """The deltas of one batch: at most `max_messages_per_write` strings of valid Unicode
    (no lone surrogate; no U+0000, which PostgreSQL text cannot hold), together at most
    one message's size."""
    if isinstance(deltas, str) or not isinstance(deltas, Sequence):
        raise InvalidInput("deltas must be a list of strings")
    if len(deltas) > limits.max_messages_per_write:
        raise PayloadTooLarge(
            f"{len(deltas)} deltas in one batch; the limit is {limits.max_messages_per_write}"
        )
    if not deltas and not allow_empty:
        raise InvalidInput("at least one delta is required")
    size = 0
    for i, d in enumerate(deltas):
        if not isinstance(d, str):
            raise InvalidInput(f"deltas[{i}] is not a string")
        if "\x00" in d:
            raise InvalidInput(f"deltas[{i}] holds U+0000")
        try:
            size += len(d.encode("utf-8"))
        except UnicodeEncodeError:
            raise InvalidInput(f"deltas[{i}] holds a lone surrogate: not Unicode") from None
    if size > limits.max_message_bytes:
        raise PayloadTooLarge(f"{size} bytes of deltas; the limit is {limits.max_message_bytes}")
    return list(deltas)


class Streams:
    """The stream commands: each checks its arguments and hands the write loop what to do
    to the session; a completion's message is assembled from the streams view."""

    def __init__(
        self, views: SessionViews, writes: WriteLoop, tuning: Tuning,
        addresses: SessionAddresses, erasures: Erasures,
    ) -> None:  # fmt: skip
        self._views, self._writes, self._tuning = views, writes, tuning
        self._addresses, self._erasures = addresses, erasures

    def open_stream(
        self, key: str, *, role: str = "assistant", stream_id: str | None = None,
        turn: str | None = None, parent: str | None = None, **kw: Any,
    ) -> OpenedStream:  # fmt: skip
        """Open a stream (the session is created if need be); its id is new to the session."""
        stream_id = check_stream_id(stream_id or f"s-{uuid.uuid4().hex}")
        parse_messages([{"role": role, "content": ""}], self._tuning.limits, allow_empty=False)
        for name, value in (("turn", turn), ("parent", parent)):
            if value is not None:  # (no NUL: PostgreSQL's text refuses it; nor a surrogate)
                check_text(value, name, 256, allow_empty=True, allow_controls=True)

        def command(s: Session, audit: dict[str, Any]) -> None:
            if s.version and self._views.stream_view(s.id, stream_id) is not None:
                raise StreamConflict(f"stream {stream_id!r} of session {key!r} exists already")
            s.start_stream(stream_id, role, turn, parent, **audit)

        request = {"stream_id": stream_id, "role": role, "turn": turn, "parent": parent}
        result = self._writes.write(key, "stream_open", request, command=command, create=True, **kw)
        return OpenedStream(stream_id, result)

    def append_stream(
        self, key: str, stream_id: str, deltas: Sequence[str], **kw: Any
    ) -> WriteResult:
        """Append a batch of deltas to an open stream."""
        check_stream_id(stream_id)
        batch = check_deltas(deltas, self._tuning.limits, allow_empty=False)
        return self._writes.write(
            key, "stream_chunks", {"stream_id": stream_id, "deltas": batch},
            command=lambda s, a: s.append_chunks(stream_id, batch, **a), **kw,
        )  # fmt: skip

    def complete_stream(
        self, key: str, stream_id: str, deltas: Sequence[str] = (),
        additional_kwargs: dict[str, Any] | None = None, **kw: Any,
    ) -> WriteResult:  # fmt: skip
        """End a stream: its text (with these last deltas) becomes a message of the history."""
        check_stream_id(stream_id)
        batch = check_deltas(deltas, self._tuning.limits, allow_empty=True)
        counts: list[TokenCount] = []

        def command(s: Session, audit: dict[str, Any]) -> None:
            message = self._assembled(s, stream_id, batch, additional_kwargs, counts)
            assert message is not None
            s.complete_stream(stream_id, batch, message, **audit)

        request = {"stream_id": stream_id, "deltas": batch, "kwargs": additional_kwargs}
        return self._writes.write(
            key, "stream_complete", request, command=command, counts=counts, **kw
        )

    def abort_stream(
        self, key: str, stream_id: str, cause: str, deltas: Sequence[str] = (),
        keep_partial: bool = False, **kw: Any,
    ) -> WriteResult:  # fmt: skip
        """End a stream unfinished; `cause` is one of CAUSES. The partial text stays in the
        events; with `keep_partial` (and some text) it is also a message of the history."""
        check_stream_id(stream_id)
        if cause not in CAUSES:
            raise InvalidInput(f"cause must be one of {', '.join(CAUSES)}; got {cause!r}")
        batch = check_deltas(deltas, self._tuning.limits, allow_empty=True)
        counts: list[TokenCount] = []

        def command(s: Session, audit: dict[str, Any]) -> None:
            message = None
            if keep_partial:
                message = self._assembled(s, stream_id, batch, None, counts, allow_empty=False)
            s.abort_stream(stream_id, batch, cause, message, **audit)

        request = {"stream_id": stream_id, "deltas": batch, "cause": cause, "keep": keep_partial}
        return self._writes.write(
            key, "stream_abort", request, command=command, counts=counts, **kw
        )

    def abort_idle_streams(self, idle_seconds: float, *, limit: int = 100) -> int:
        """Abort (cause "timeout") the open streams of every tenant with no event for
        `idle_seconds`: streams whose writer went away, this process's or a dead one's.
        Returns how many this call aborted (another process may abort some first)."""
        before = datetime.now(UTC) - timedelta(seconds=idle_seconds)
        aborted = 0
        for tenant, key, stream_id in self._views.idle_streams(before, limit):
            try:
                self.abort_stream(key, stream_id, "timeout", tenant=tenant, actor="ledger",
                                  reason=f"no event for {idle_seconds:g} s")  # fmt: skip
            except StreamConflict:
                continue
            aborted += 1
        return aborted

    def _assembled(
        self, s: Session, stream_id: str, deltas: list[str],
        additional_kwargs: dict[str, Any] | None, counts: list[TokenCount],
        allow_empty: bool = True,
    ) -> dict[str, Any] | None:  # fmt: skip
        """The stream's message: its text so far and `deltas`, counted into `counts`."""
        view = self._views.stream_view(s.id, stream_id) if s.version else None
        if view is None or view.state != OPEN:
            s.check_open(stream_id)
            raise StreamConflict(f"stream {stream_id!r} of session {s.key!r} is not open")
        text = view.text + "".join(deltas)
        counts.clear()
        if not text and not allow_empty:
            return None
        message = {"role": view.role, "content": text, "additional_kwargs": additional_kwargs or {}}
        parsed = parse_messages([message], self._tuning.limits, allow_empty=False)
        counts.append(self._tuning.tokenizer.count(parsed.contents[0]))
        return parsed.dicts[0]

    def stream_state(
        self, key: str, stream_id: str, *, tenant: str | None = None
    ) -> StreamView | None:
        """The stream as its events left it, or None; SessionErasedError once the session
        was erased (its streams' rows are gone with its content)."""
        sid = session_id(self._addresses.tenant(tenant), key)
        found = self._views.stream_view(sid, stream_id)
        if found is None and (erased := self._erasures.error(sid, key)) is not None:
            raise erased
        return found


class StreamTarget(Protocol):
    """What a `StreamWriter` writes through: the ledger's stream commands and batching."""

    stream_flush_bytes: int
    stream_flush_ms: int

    def open_stream(
        self, key: str, *, role: str = ..., stream_id: str | None = ..., turn: str | None = ...,
        parent: str | None = ..., **kw: Any,
    ) -> OpenedStream: ...  # fmt: skip

    def append_stream(
        self, key: str, stream_id: str, deltas: Sequence[str], **kw: Any
    ) -> WriteResult: ...

    def complete_stream(
        self, key: str, stream_id: str, deltas: Sequence[str] = ...,
        additional_kwargs: dict[str, Any] | None = ..., **kw: Any,
    ) -> WriteResult: ...  # fmt: skip

    def abort_stream(
        self, key: str, stream_id: str, cause: str, deltas: Sequence[str] = ...,
        keep_partial: bool = ..., **kw: Any,
    ) -> WriteResult: ...  # fmt: skip


class StreamWriter:
    """One stream of a session, written as its deltas arrive (see `Ledger.stream`).
    Deltas are held until `stream_flush_bytes` of them or `stream_flush_ms` since the last
    flush, checked at each write: a process killed mid-stream loses at most that."""

    def __init__(
        self, ledger: StreamTarget, key: str, role: str, stream_id: str | None,
        turn: str | None, parent: str | None, kw: dict[str, Any],
    ) -> None:  # fmt: skip
        self._ledger, self.key, self.role = ledger, key, role
        self.stream_id = stream_id
        self._turn, self._parent, self._kw = turn, parent, kw
        self._held: list[str] = []
        self._held_bytes = 0
        self._flushed_at = 0.0
        self.result: WriteResult | None = None  # the completion's or abort's

    def open(self) -> StreamWriter:
        opened = self._ledger.open_stream(
            self.key, role=self.role, stream_id=self.stream_id, turn=self._turn,
            parent=self._parent, **self._kw,
        )  # fmt: skip
        self.stream_id = opened.stream_id
        self._flushed_at = time.monotonic()
        return self

    def write(self, delta: str) -> None:
        """Record one delta (flushed in batches)."""
        if self._hold(delta):
            self.flush()

    def _hold(self, delta: str) -> bool:
        """Hold `delta`; True when a flush is due."""
        if self.result is not None:
            raise StreamConflict(f"stream {self.stream_id!r} has ended")
        self._held.append(delta)
        self._held_bytes += len(delta.encode("utf-8"))
        return (
            self._held_bytes >= self._ledger.stream_flush_bytes
            or (time.monotonic() - self._flushed_at) * 1000 >= self._ledger.stream_flush_ms
        )

    def flush(self) -> None:
        if self._held:
            self._ledger.append_stream(self.key, self._id, self._held, **self._kw)
        self._held, self._held_bytes, self._flushed_at = [], 0, time.monotonic()

    def complete(self, additional_kwargs: dict[str, Any] | None = None) -> WriteResult:
        """End the stream; its text enters the history as one message."""
        held, self._held = self._held, []
        self.result = self._ledger.complete_stream(self.key, self._id, held, additional_kwargs,
                                                   **self._kw)  # fmt: skip
        return self.result

    def abort(self, cause: str = "error", *, keep_partial: bool = False) -> WriteResult:
        """End the stream unfinished (the deltas written so far are kept in the events)."""
        held, self._held = self._held, []
        self.result = self._ledger.abort_stream(self.key, self._id, cause, held, keep_partial,
                                                **self._kw)  # fmt: skip
        return self.result

    @property
    def _id(self) -> str:
        if self.stream_id is None or self._flushed_at == 0.0:
            raise StreamConflict("the stream is not open yet: use it in a `with` block")
        return self.stream_id

    def __enter__(self) -> StreamWriter:
        return self.open()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self.result is not None:
            return
        if kind is None:
            self.complete()
        else:
            self.abort(cause_of(exc))

    async def awrite(self, delta: str) -> None:
        """`write`, with a flush in a worker thread (the event loop never waits on it)."""
        if self._hold(delta):
            await asyncio.to_thread(self.flush)

    async def __aenter__(self) -> StreamWriter:
        return await asyncio.to_thread(self.open)

    async def __aexit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Shielded: a cancelled task still records how its stream ended.
        await asyncio.shield(asyncio.to_thread(self.__exit__, kind, exc, tb))


def cause_of(exc: BaseException | None) -> str:
    """Cancellation (the consumer went away) reads as client_gone; anything else, error."""
    if isinstance(exc, asyncio.CancelledError | GeneratorExit | KeyboardInterrupt):
        return "client_gone"
    return "error"
