"""Tees: hand every delta of a LlamaIndex streaming answer to the caller unchanged, and
record it in a session's stream as it goes (`Ledger.stream`): what the user saw is kept
even when the answer is cut off.

- `tee_tokens` / `atee_tokens`: a plain token iterator (e.g. `response.response_gen` of a
  `StreamingAgentChatResponse`, or `async_response_gen()`).
- `tee_response`: a `StreamingAgentChatResponse`, completed with its tool outputs and
  source nodes (`provenance.py`, as `record_response` keeps them).
- `tee_events`: a workflow's `handler.stream_events()`; each LLM call's `AgentStream`
  deltas are one stream, completed at its `AgentOutput` with the tool calls it made
  (`tool_calls`) and the tool results it was given (`tool_results`: the `ToolCallResult`
  events since the call before, with their raw outputs).

A stream that ends normally completes (its message enters the history once); one whose
consumer stops early is aborted as `client_gone`, one whose producer fails as `error`.
The completed message is the one the history gets: give the agent a memory of its own
(not a ledger memory of the same session), or it would be stored twice.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterable, AsyncIterator, Iterable, Iterator
from typing import Any

from llama_index.core.agent.workflow import AgentOutput, AgentStream, ToolCallResult
from llama_index.core.chat_engine.types import StreamingAgentChatResponse

from session_ledger.domain.ledger import Ledger
from session_ledger.domain.streams import StreamWriter, cause_of

from .provenance import ProvenanceBudget, jsonable, tool_outputs
from .responses import response_provenance


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
        s.complete(response_provenance(response, ledger.limits.max_provenance_bytes))


async def tee_events(
    ledger: Ledger, key: str, events: AsyncIterable[Any], **stream: Any
) -> AsyncIterator[Any]:
    """Every event of `events` (a workflow handler's `stream_events()`), unchanged; the
    `AgentStream` deltas of each LLM call recorded as one stream, completed at the
    `AgentOutput` that ends the call, with the tool calls it made and the tool results
    the call was given (those that came before it)."""
    writer: StreamWriter | None = None
    results: list[ToolCallResult] = []  # given to the next LLM call
    try:
        async for event in events:
            if isinstance(event, AgentStream) and event.delta:
                if writer is None:
                    writer = await ledger.stream(key, **stream).__aenter__()
                await writer.awrite(event.delta)
            elif isinstance(event, ToolCallResult):
                results.append(event)
            elif isinstance(event, AgentOutput) and writer is not None:
                extra = _call_provenance(ledger, event, results)
                await asyncio.to_thread(writer.complete, extra or None)
                writer, results = None, []
            yield event
    except BaseException as e:
        if writer is not None:
            # Shielded: a cancelled consumer still records how the stream ended.
            await asyncio.shield(asyncio.to_thread(writer.abort, cause_of(e)))
        raise
    if writer is not None:  # the run ended without an AgentOutput for the last call
        await asyncio.to_thread(writer.complete, _call_provenance(ledger, None, results) or None)


def _call_provenance(
    ledger: Ledger, output: AgentOutput | None, results: list[ToolCallResult]
) -> dict[str, Any]:
    extra: dict[str, Any] = {}
    if output is not None and output.tool_calls:
        extra["tool_calls"] = [jsonable(c.model_dump()) for c in output.tool_calls]
    if results:
        given = tool_outputs([r.tool_output for r in results],
                             ProvenanceBudget(ledger.limits.max_provenance_bytes))  # fmt: skip
        for item, result in zip(given, results, strict=True):
            item.update(tool_id=result.tool_id, tool_kwargs=jsonable(result.tool_kwargs))
        extra["tool_results"] = given
    return extra
