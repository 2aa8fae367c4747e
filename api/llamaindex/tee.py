"""Tees: hand every delta of a LlamaIndex streaming answer to the caller unchanged, and
record it in a session's stream as it goes (`Ledger.stream`): what the user saw is kept
even when the answer is cut off.

- `tee_tokens` / `atee_tokens`: a plain token iterator (e.g. `response.response_gen` of a
  `StreamingAgentChatResponse`, or `async_response_gen()`).
- `tee_response`: a `StreamingAgentChatResponse`, completed with its tool outputs.
- `tee_events`: a workflow's `handler.stream_events()`; each LLM call's `AgentStream`
  deltas are one stream, completed at its `AgentOutput` (tool calls kept with it).

A stream that ends normally completes (its message enters the history once); one whose
consumer stops early is aborted as `client_gone`, one whose producer fails as `error`.
The completed message is the one the history gets: give the agent a memory of its own
(not a ledger memory of the same session), or it would be stored twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from llama_index.core.agent.workflow import AgentOutput, AgentStream
from llama_index.core.chat_engine.types import StreamingAgentChatResponse

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.streams import StreamWriter, cause_of

from .responses import _plain, _tool_output


def tee_tokens(ledger: Ledger, key: str, tokens: Iterable[str], **stream: Any) -> Iterator[str]:
    """Yield each token of `tokens` unchanged, recording it (`stream`: `Ledger.stream`'s
    arguments: role, stream_id, turn, parent, tenant, actor, reason)."""
    with ledger.stream(key, **stream) as s:
        for token in tokens:
            s.write(token)
            yield token


async def atee_tokens(
    ledger: Ledger, key: str, tokens: AsyncIterable[str], **stream: Any
) -> AsyncIterator[str]:
    """`tee_tokens` for an async iterator (writes happen in worker threads)."""
    async with ledger.stream(key, **stream) as s:
        async for token in tokens:
            await s.awrite(token)
            yield token


def tee_response(
    ledger: Ledger, key: str, response: StreamingAgentChatResponse, **stream: Any
) -> Iterator[str]:
    """The tokens of `response.response_gen`, recorded; the completed message keeps the
    response's tool outputs (`sources`) and source nodes, as `record_response` does."""
    with ledger.stream(key, **stream) as s:
        for token in response.response_gen:
            s.write(token)
            yield token
        s.complete(_provenance(response))


async def tee_events(
    ledger: Ledger, key: str, events: AsyncIterable[Any], **stream: Any
) -> AsyncIterator[Any]:
    """Every event of `events` (a workflow handler's `stream_events()`), unchanged; the
    `AgentStream` deltas of each LLM call recorded as one stream, completed at the
    `AgentOutput` that ends the call."""
    writer: StreamWriter | None = None
    try:
        async for event in events:
            if isinstance(event, AgentStream) and event.delta:
                if writer is None:
                    writer = await ledger.stream(key, **stream).__aenter__()
                await writer.awrite(event.delta)
            elif isinstance(event, AgentOutput) and writer is not None:
                calls = [_plain(c.model_dump()) for c in event.tool_calls]
                await asyncio.to_thread(writer.complete, {"tool_calls": calls} if calls else None)
                writer = None
            yield event
    except BaseException as e:
        if writer is not None:
            # Shielded: a cancelled consumer still records how the stream ended.
            await asyncio.shield(asyncio.to_thread(writer.abort, cause_of(e)))
        raise
    if writer is not None:  # the run ended without an AgentOutput for the last call
        await asyncio.to_thread(writer.complete)


def _provenance(response: StreamingAgentChatResponse) -> dict[str, Any]:
    return {
        "sources": [_tool_output(s) for s in response.sources],
        "source_nodes": [
            {"node_id": n.node.node_id, "score": n.score} for n in response.source_nodes
        ],
    }
