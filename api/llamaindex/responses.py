"""Record an agent's answer with what it was built from.

`record_response(memory, response)` appends the assistant message of an
`AgentChatResponse` (or of a finished `StreamingAgentChatResponse`) with, in its
`additional_kwargs`, the tool outputs (`sources`: input, content and raw output) and the
retrieved nodes (`source_nodes`: id, score, text and metadata), within
`max_provenance_bytes` (`provenance.py`): one write, so the audit trail, replay and
`get_all` show the answer together with what the model was given. Use it where your
code stores the answer itself.
"""

from __future__ import annotations

from typing import Any

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse
from llama_index.core.memory.types import BaseMemory

from session_ledger.domain.errors import InvalidInput
from session_ledger.domain.inputs import Limits
from session_ledger.domain.ledger import Ledger

from .provenance import jsonable, provenance

AnyResponse = AgentChatResponse | StreamingAgentChatResponse


def response_message(response: AnyResponse, max_bytes: int | None = None) -> LlamaMessage:
    """The assistant message for `response`, its provenance in `additional_kwargs`
    (`max_bytes`: the provenance's budget; None: the ledger's default)."""
    if isinstance(response, StreamingAgentChatResponse) and not response.is_done:
        raise InvalidInput(
            "the streaming response is not finished: consume response_gen (or "
            "async_response_gen) before recording it"
        )
    budget = Limits().max_provenance_bytes if max_bytes is None else max_bytes
    extra = response_provenance(response, budget)
    metadata = getattr(response, "metadata", None)
    if metadata:
        extra["response_metadata"] = jsonable(metadata)
    return LlamaMessage(role="assistant", content=str(response), additional_kwargs=extra)


def response_provenance(response: AnyResponse, max_bytes: int) -> dict[str, Any]:
    """`sources` and `source_nodes` of a response, as the recorded message keeps them."""
    return provenance(response.sources, response.source_nodes, max_bytes)


def record_response(
    memory: BaseMemory, response: AnyResponse, *, max_bytes: int | None = None
) -> LlamaMessage:
    """Append `response` as an assistant message with its sources; returns the message.
    `max_bytes` (None: the in-process ledger's `max_provenance_bytes`, else its default)."""
    message = response_message(response, _budget(memory, max_bytes))
    memory.put(message)
    return message


async def arecord_response(
    memory: BaseMemory, response: AnyResponse, *, max_bytes: int | None = None
) -> LlamaMessage:
    message = response_message(response, _budget(memory, max_bytes))
    await memory.aput(message)
    return message


def _budget(memory: BaseMemory, max_bytes: int | None) -> int | None:
    if max_bytes is not None:
        return max_bytes
    ledger = getattr(getattr(memory, "_backend", None), "ledger", None)
    return ledger.limits.max_provenance_bytes if isinstance(ledger, Ledger) else None
