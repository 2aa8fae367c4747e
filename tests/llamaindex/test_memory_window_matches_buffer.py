"""LedgerMemory.get returns what ChatMemoryBuffer.get returns, in process and over HTTP.

The unit test's histories and helpers, through the adapter this time: same history,
whitespace tokens (the test servers' LEDGER_TOKENIZER), same limits.
"""

from __future__ import annotations

import asyncio
import itertools
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from llama_index.core.base.llms.types import ChatMessage

from session_ledger.api.llamaindex import LedgerMemory
from tests.llamaindex.conftest import Where
from tests.unit.test_window_matches_llamaindex import HISTORY, llamaindex_window

EXAMPLES = itertools.count()


def dumps(messages: list[ChatMessage]) -> list[dict[str, Any]]:
    return [m.model_dump(mode="json") for m in messages]


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(history=HISTORY, limit=st.integers(1, 40), initial=st.integers(0, 45))
def test_get_equals_chat_memory_buffer(
    where: Where, history: list[dict[str, Any]], limit: int, initial: int
) -> None:
    memory = LedgerMemory.from_defaults(
        chat_history=[ChatMessage.model_validate(m) for m in history],
        chat_store_key=f"{where.prefix}{next(EXAMPLES)}", token_limit=limit, **where.kwargs,
    )  # fmt: skip
    if initial > limit:
        with pytest.raises(ValueError, match="Initial token count exceeds token limit"):
            memory.get(initial_token_count=initial)
        return
    expected = llamaindex_window(history, limit, initial, str.split)
    assert dumps(memory.get(initial_token_count=initial)) == expected
    assert dumps(asyncio.run(memory.aget(initial_token_count=initial))) == expected


@pytest.mark.parametrize(
    ("texts", "limit"),
    [(["Hi\n", "\nthere"], 3), (["y", "\t\t", "\t\t"], 3), (["a", "", "\n1"], 2)],
)
@pytest.mark.parametrize("function", ["get_tokenizer()", "encoding_for_model().encode"])
def test_get_with_llamaindexs_default_tokenizer_equals_chat_memory_buffer(
    tmp_path: Any, texts: list[str], limit: int, function: str
) -> None:
    """`tokenizer_fn=get_tokenizer()`, or tiktoken's bound encode as LlamaIndex's docs set
    it, is cl100k_base: its windows are counted joined where whitespace meets, on a
    ledger whose stored counts are another tokenizer's too."""
    import tiktoken
    from llama_index.core.utils import get_tokenizer

    from tests.conftest import make_ledger, make_settings

    tokenizer_fn = (
        get_tokenizer() if function == "get_tokenizer()"
        else tiktoken.encoding_for_model("gpt-3.5-turbo").encode
    )  # fmt: skip
    history = [{"role": "user", "content": t} for t in texts]
    expected = llamaindex_window(history, limit, 0, tokenizer_fn)
    for tokenizer in ("whitespace", "cl100k_base"):
        ledger = make_ledger(make_settings("sqlite", tmp_path / tokenizer, tokenizer=tokenizer))
        memory = LedgerMemory.from_defaults(
            chat_history=[ChatMessage.model_validate(m) for m in history], chat_store_key="k",
            token_limit=limit, ledger=ledger, tokenizer_fn=tokenizer_fn,
        )  # fmt: skip
        assert dumps(memory.get()) == expected, tokenizer
        assert dumps(asyncio.run(memory.aget())) == expected, tokenizer
        ledger.close()


PNG = ("iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5E"
       "rkJggg==")  # fmt: skip


def test_a_message_with_legacy_images_reads_back_as_chat_memory_buffer_holds_it(
    where: Where,
) -> None:
    """`additional_kwargs={"images": [ImageDocument]}` (LlamaIndex's legacy images): an
    image block is added when the message is made; the read gives the same message, the
    documents as documents, not the legacy conversion run again on their dumps (which
    raised AttributeError on every later read, and would add each block twice)."""
    from llama_index.core.memory import ChatMemoryBuffer
    from llama_index.core.schema import ImageDocument

    messages = [
        ChatMessage(role="user", content="look", additional_kwargs={
            "before": 1, "images": [ImageDocument(image=PNG)], "after": [2]}),
        ChatMessage(role="assistant", content="a pixel", additional_kwargs={"images": []}),
    ]  # fmt: skip
    buffer = ChatMemoryBuffer.from_defaults(token_limit=3000)
    memory = LedgerMemory.from_defaults(
        token_limit=3000, chat_store_key=f"{where.prefix}images", **where.kwargs
    )
    for message in messages:
        buffer.put(message)
        memory.put(message)
    for read in ("get", "get_all"):
        theirs, ours = getattr(buffer, read)(), getattr(memory, read)()
        assert dumps(ours) == dumps(theirs), read
        assert [list(m.additional_kwargs) for m in ours] == [
            list(m.additional_kwargs) for m in theirs
        ]
        assert isinstance(ours[0].additional_kwargs["images"][0], ImageDocument)
        assert len(ours[0].blocks) == 2


@pytest.mark.parametrize("limit", [0, -5])
def test_a_token_limit_below_one_is_refused_when_the_memory_is_made(
    local_ledger: Any, limit: int
) -> None:
    """As ChatMemoryBuffer refuses it: before the history is written, not at `get`."""
    from llama_index.core.memory import ChatMemoryBuffer

    history = [ChatMessage(role="user", content="kept out")]
    with pytest.raises(ValueError, match="Token limit must be set and greater than 0"):
        ChatMemoryBuffer.from_defaults(chat_history=history, token_limit=limit)
    with pytest.raises(ValueError, match="Token limit must be set and greater than 0"):
        LedgerMemory.from_defaults(
            chat_history=history, token_limit=limit, ledger=local_ledger, chat_store_key="k"
        )
    assert local_ledger.get_all("k") == []
