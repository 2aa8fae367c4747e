"""Record an agent's answer with what it was built from.

`record_response(memory, response)` appends the assistant message of an
`AgentChatResponse` (or of a finished `StreamingAgentChatResponse`) with, in its
`additional_kwargs`, the tool outputs (`sources`) and the retrieved nodes' ids and
scores (`source_nodes`): one write, so the audit trail and `get_all` show the answer
together with its provenance. Use it where your code stores the answer itself.
"""

from __future__ import annotations

import json
from typing import Any

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from llama_index.core.chat_engine.types import AgentChatResponse, StreamingAgentChatResponse
from llama_index.core.memory.types import BaseMemory
from llama_index.core.tools.types import ToolOutput

from session_ledger.domain.errors import InvalidInput

AnyResponse = AgentChatResponse | StreamingAgentChatResponse


def response_message(response: AnyResponse) -> LlamaMessage:
    """The assistant message for `response`, its provenance in `additional_kwargs`."""
    if isinstance(response, StreamingAgentChatResponse) and not response.is_done:
        raise InvalidInput(
            "the streaming response is not finished: consume response_gen (or "
            "async_response_gen) before recording it"
        )
    extra: dict[str, Any] = {
        "sources": [_tool_output(s) for s in response.sources],
        "source_nodes": [
            {"node_id": n.node.node_id, "score": n.score} for n in response.source_nodes
        ],
    }
    metadata = getattr(response, "metadata", None)
    if metadata:
        extra["response_metadata"] = _plain(metadata)
    return LlamaMessage(role="assistant", content=str(response), additional_kwargs=extra)


def record_response(memory: BaseMemory, response: AnyResponse) -> LlamaMessage:
    """Append `response` as an assistant message with its sources; returns the message."""
    message = response_message(response)
    memory.put(message)
    return message


async def arecord_response(memory: BaseMemory, response: AnyResponse) -> LlamaMessage:
    message = response_message(response)
    await memory.aput(message)
    return message


def _tool_output(output: ToolOutput) -> dict[str, Any]:
    return {
        "tool_name": output.tool_name,
        "content": output.content,
        "raw_input": _plain(output.raw_input),
        "is_error": output.is_error,
    }


def _plain(value: Any) -> Any:
    """`value` as JSON: what JSON cannot hold becomes its `str()`."""
    return json.loads(json.dumps(value, default=str))
