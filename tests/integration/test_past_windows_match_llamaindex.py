"""The window at every version of a session equals `ChatMemoryBuffer.get` over the
history that version held, on every store.

Random sessions longer than two tail batches, whose rows later writes end at every
position and by every kind of write (delete any message, delete the last, archive the
oldest, set keeping a prefix or not, reset). The expected history of each version is
rebuilt apart from the ledger: the same writes applied to a plain list. The windows are
LlamaIndex's own, with the same tokenizer (whitespace: the stored counts; characters: a
caller's), at limits that cut the history and that hold all of it.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.ports import WriteResult
from session_ledger.domain.tokens import load_tokenizer
from session_ledger.projections.sql import TAIL_BATCH
from tests.conftest import make_ledger, make_settings
from tests.unit.test_window_matches_llamaindex import as_llamaindex, llamaindex_window

# A message's shape: its role (every one, some that cannot open a window) and length.
ROLES = ("user", "assistant", "tool", "user", "system")
SHAPE = st.integers(0, 3 * len(ROLES) - 1)
Write = tuple[Any, ...]
# (name, the tokenizer LlamaIndex is given, what `get` is given): whitespace is the
# test ledger's own tokenizer, so its stored counts are read; characters are a caller's.
TOKENIZERS: tuple[tuple[str, Callable[[str], Sequence[Any]], dict[str, Any]], ...] = (
    ("stored counts", str.split, {}),
    ("caller's", list, {"tokenizer": list}),
)
KEYS = itertools.count()


class Replayed:
    """One session written through the ledger and the same writes applied to a plain
    list beside it: the history each version held, known without the ledger."""

    def __init__(self, ledger: Ledger) -> None:
        self.ledger = ledger
        self.key = f"past-{next(KEYS)}"
        self.history: list[dict[str, str]] = []
        self.at: dict[int, list[dict[str, str]]] = {1: []}  # version 1: the session started
        self._made = itertools.count()

    def messages(self, shapes: Sequence[int]) -> list[dict[str, str]]:
        """New messages, each text its own (no two rows alike), of the given shapes."""
        return [
            {"role": ROLES[shape % len(ROLES)],
             "content": " ".join([f"m{next(self._made)}"] + ["w"] * (shape // len(ROLES)))}
            for shape in shapes
        ]  # fmt: skip

    def apply(self, write: Write) -> None:
        """Run `write` on the ledger and on the list; one that would end nothing in an
        empty session (delete, archive) is left out."""
        kind, *args = write
        count, key, ledger = len(self.history), self.key, self.ledger
        result: WriteResult
        if kind == "put":
            added = self.messages(args[0])
            result = ledger.put_messages(key, added)
            self.history += added
        elif kind == "delete" and count:
            index = args[0] % (2 * count) - count  # any position, counted from either end
            result = ledger.delete_message(key, index)
            del self.history[index]
        elif kind == "delete_last" and count:
            result = ledger.delete_last_message(key)
            del self.history[-1]
        elif kind == "archive" and count:
            result = ledger.archive_oldest(key, args[0])
            del self.history[: args[0]]
        elif kind == "set_keeping":  # the first `kept` messages stay, the rest are new
            kept = args[0] % (count + 1)
            self.history = self.history[:kept] + self.messages(args[1])
            result = ledger.set(key, self.history)
        elif kind == "set":  # a history that shares no message with the one it replaces
            self.history = self.messages(args[0])
            result = ledger.set(key, self.history)
        elif kind == "reset":
            result = ledger.reset(key)
            self.history = []
        else:
            return
        self.at[result.version] = list(self.history)


def limits(history: list[dict[str, str]], tokens: Callable[[str], Sequence[Any]]) -> list[int]:
    """Token limits that cut the history near its start, middle and end, and that hold
    all of it (as ChatMemoryBuffer counts it: the texts joined by spaces)."""
    whole = len(tokens(" ".join(m["content"] for m in history)))
    return sorted({max(1, n) for n in (1, whole // 4, whole // 2, whole - 1, whole, whole + 50)})


def check_every_version(
    replayed: Replayed, moments: int = 3, tokenizers: tuple[Any, ...] = TOKENIZERS
) -> None:
    """The history and the window at each version (at every limit, with each tokenizer)
    are what the list held then; the windows at the moments of the last `moments`
    versions are those of the versions the moments name."""
    ledger, key = replayed.ledger, replayed.key
    head = ledger.head(key).version
    assert sorted(replayed.at) == list(range(1, head + 1))
    for version, history in replayed.at.items():
        stored = ledger.get_all(key, as_of_version=version)
        assert [m.content for m in stored] == [m["content"] for m in history], version
        for name, tokens, given_tokenizer in tokenizers:
            for limit in limits(history, tokens):
                got = ledger.get(key, token_limit=limit, as_of_version=version, **given_tokenizer)
                expected = llamaindex_window(history, limit, 0, tokens)
                assert as_llamaindex(got) == expected, (version, name, limit, len(history))
    for version in range(max(1, head - moments + 1), head + 1):
        moment = ledger.head(key, as_of_version=version).updated_at
        named = ledger.head(key, as_of=moment).version  # (writes in one instant: the last)
        history = replayed.at[named]
        for name, tokens, given_tokenizer in tokenizers:
            limit = limits(history, tokens)[1]
            got = ledger.get(key, token_limit=limit, as_of=moment, **given_tokenizer)
            expected = llamaindex_window(history, limit, 0, tokens)
            assert as_llamaindex(got) == expected, (version, moment, name, limit)


SHAPES = st.lists(SHAPE, max_size=70)
# Writes that end some of the session's rows and keep others: at any position, the
# newest, the oldest, all after a kept prefix.
ENDING = st.one_of(
    st.tuples(st.just("delete"), st.integers(0, 10**6)),
    st.tuples(st.just("delete_last")),
    st.tuples(st.just("archive"), st.integers(1, 80)),
    st.tuples(st.just("set_keeping"), st.integers(0, 10**6), SHAPES),
)
WRITES = st.lists(
    st.one_of(
        st.tuples(st.just("put"), st.lists(SHAPE, min_size=1, max_size=70)),
        ENDING,
        st.tuples(st.just("set"), SHAPES),  # no message kept: every row ends
        st.tuples(st.just("reset")),
    ),
    max_size=6,
)


# A session longer than two tail batches from the start, then writes, then writes that
# end rows earlier versions held and keep others.
SESSIONS = {
    "first": st.lists(SHAPE, min_size=2 * TAIL_BATCH + 1, max_size=4 * TAIL_BATCH),
    "writes": WRITES,
    "ends": st.lists(ENDING, min_size=1, max_size=3),
}
SLOW = [HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large]


def replay(
    replayed: Replayed, first: list[int], writes: list[Write], ends: list[Write]
) -> Replayed:
    replayed.apply(("put", first))
    for write in [*writes, *ends]:
        replayed.apply(write)
    return replayed


@settings(max_examples=25, deadline=None, suppress_health_check=SLOW)
@given(**SESSIONS)
def test_every_versions_window_equals_chat_memory_buffer(
    ledger: Ledger, first: list[int], writes: list[Write], ends: list[Write]
) -> None:
    check_every_version(replay(Replayed(ledger), first, writes, ends))


# Texts whose edges are whitespace, and empty ones: cl100k_base counts such windows
# otherwise than their messages' counts add up to (domain.tokens.JoinedWindow).
EDGED = ("m{}\n", "m{} w\n\n", "\n\nm{}", " m{} ", "m{}", "\t", "", "m{}  ", "\n", "ok.\n")


class EdgedReplayed(Replayed):
    def messages(self, shapes: Sequence[int]) -> list[dict[str, str]]:
        return [
            {"role": ROLES[shape % len(ROLES)],
             "content": EDGED[(shape + n) % len(EDGED)].format(n)}
            for shape, n in zip(shapes, self._made, strict=False)
        ]  # fmt: skip


@pytest.fixture
def cl100k_ledger(store: str, tmp_path: Path) -> Iterator[Ledger]:
    instance = make_ledger(make_settings(store, tmp_path, tokenizer="cl100k_base"))
    yield instance
    instance.close()


@settings(max_examples=8, deadline=None, suppress_health_check=SLOW)
@given(**SESSIONS)
def test_every_versions_window_by_cl100k_equals_chat_memory_buffer_where_whitespace_meets(
    cl100k_ledger: Ledger, first: list[int], writes: list[Write], ends: list[Write]
) -> None:
    replayed = replay(EdgedReplayed(cl100k_ledger), first, writes, ends)
    encode = load_tokenizer("cl100k_base").encode
    check_every_version(replayed, tokenizers=(("stored counts", encode, {}),))
