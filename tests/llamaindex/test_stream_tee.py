"""The tees hand every delta on unchanged and record it as a stream: a real FunctionAgent
run through `stream_events()` with llama-index-core's MockFunctionCallingLLM (scripted,
streaming, no network), a real chat engine's StreamingAgentChatResponse, plain tokens."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import aclosing
from typing import Any

import pytest
from llama_index.core import VectorStoreIndex
from llama_index.core.agent.workflow import AgentStream, FunctionAgent
from llama_index.core.base.llms.types import ChatMessage, TextBlock, ToolCallBlock
from llama_index.core.chat_engine import ContextChatEngine, SimpleChatEngine
from llama_index.core.embeddings import MockEmbedding
from llama_index.core.llms import MockFunctionCallingLLM, MockLLM
from llama_index.core.schema import TextNode
from llama_index.core.tools import FunctionTool

from session_ledger.api.llamaindex import atee_tokens, tee_events, tee_response, tee_tokens
from session_ledger.domain.ledger import Ledger

pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"
)


def weather(city: str) -> str:
    """The weather in a city."""
    return f"sunny in {city}"


def streamed(messages: Sequence[ChatMessage], **kwargs: Any) -> AsyncIterator[ChatMessage]:
    """Asked about a city, stream a sentence and call the tool; shown the tool's output,
    stream the answer word by word. Each chunk's content is its delta (the mock's rule)."""

    async def chunks() -> AsyncIterator[ChatMessage]:
        last = messages[-1]
        if last.role == "tool":
            words = f"The weather: {last.content}, all day long.".split(" ")
            for i, word in enumerate(words):
                yield ChatMessage(role="assistant", content=word if i == 0 else " " + word)
            return
        yield ChatMessage(role="assistant", content="Looking ")
        yield ChatMessage(
            role="assistant",
            blocks=[
                TextBlock(text="it up."),
                ToolCallBlock(tool_call_id="call-1", tool_name="weather",
                              tool_kwargs={"city": last.content or ""}),
            ],
        )  # fmt: skip

    return chunks()


def agent() -> FunctionAgent:
    llm = MockFunctionCallingLLM(response_generator=streamed)  # type: ignore[arg-type]
    return FunctionAgent(tools=[FunctionTool.from_defaults(weather)], llm=llm, streaming=True)


async def deltas_of(events: AsyncIterator[Any]) -> list[str]:
    return [e.delta for e in [e async for e in events] if isinstance(e, AgentStream)]


def test_a_function_agent_streams_the_same_deltas_through_the_tee(local_ledger: Ledger) -> None:
    async def run() -> tuple[list[str], list[str]]:
        plain = agent().run(user_msg="Zürich")
        without = await deltas_of(plain.stream_events())
        await plain
        teed = agent().run(user_msg="Zürich")
        through = await deltas_of(tee_events(local_ledger, "agent", teed.stream_events()))
        await teed
        return without, through

    without, through = asyncio.run(run())
    assert through == without and "".join(through).endswith("all day long.")
    stored = local_ledger.get_all("agent")
    # one stream per LLM call: the tool call's sentence, then the answer
    assert [m.content for m in stored] == [
        "Looking it up.",
        "The weather: sunny in Zürich, all day long.",
    ]
    assert stored[0].additional_kwargs["tool_calls"][0]["tool_name"] == "weather"
    assert "tool_results" not in stored[0].additional_kwargs
    # the answer keeps the tool result the model was given for it, raw output included
    (given,) = stored[1].additional_kwargs["tool_results"]
    assert given["tool_name"] == "weather" and given["tool_id"] == "call-1"
    assert given["tool_kwargs"] == {"city": "Zürich"} and given["raw_input"]
    assert given["raw_output"] == given["content"] == "sunny in Zürich"
    assert given["is_error"] is False
    assert "".join(through) == "".join(m.content or "" for m in stored)
    kinds = [e.event_type for e in local_ledger.audit("agent")]
    assert kinds.count("StreamCompleted") == 2 and "StreamAborted" not in kinds


def test_a_run_cancelled_mid_stream_leaves_the_partial_aborted(local_ledger: Ledger) -> None:
    async def run() -> list[str]:
        handler = agent().run(user_msg="Oslo")
        seen: list[str] = []
        async with aclosing(tee_events(local_ledger, "cut", handler.stream_events())) as events:
            async for event in events:
                if isinstance(event, AgentStream):
                    seen.append(event.delta)
                    if event.delta == " sunny":  # the user has read part of the answer
                        break
        await handler.cancel_run()
        return seen

    seen = asyncio.run(run())
    trail = local_ledger.audit("cut")
    aborted = trail[-1]
    assert aborted.event_type == "StreamAborted" and aborted.changes["cause"] == "client_gone"
    assert aborted.changes["partial"] == "The weather: sunny"
    assert "".join(seen).endswith(aborted.changes["partial"])
    assert [m.content for m in local_ledger.get_all("cut")] == ["Looking it up."]


def test_a_context_chat_engines_retrieved_nodes_are_kept_with_the_streamed_answer(
    local_ledger: Ledger,
) -> None:
    nodes = [
        TextNode(id_="doc-1", text="Refunds take 5 days.", metadata={"file": "policy.md"}),
        TextNode(id_="doc-2", text="Shipping is free.", metadata={"file": "faq.md"}),
    ]
    index = VectorStoreIndex(nodes, embed_model=MockEmbedding(embed_dim=8))
    engine = ContextChatEngine.from_defaults(
        retriever=index.as_retriever(similarity_top_k=2), llm=MockLLM()
    )
    response = engine.stream_chat("refunds?")
    tokens = list(tee_response(local_ledger, "rag", response))
    (answer,) = local_ledger.get_all("rag")
    assert answer.content == "".join(tokens)
    extra = answer.additional_kwargs
    texts = {n["node_id"]: (n["text"], n["metadata"]) for n in extra["source_nodes"]}
    assert texts == {"doc-1": ("Refunds take 5 days.", {"file": "policy.md"}),
                     "doc-2": ("Shipping is free.", {"file": "faq.md"})}  # fmt: skip
    (retrieved,) = extra["sources"]  # the retriever as a tool: its raw output is the nodes
    assert retrieved["tool_name"] == "retriever"
    assert retrieved["raw_input"] == {"message": "refunds?"}
    assert {n["node"]["text"] for n in retrieved["raw_output"]} == {
        "Refunds take 5 days.", "Shipping is free."
    }  # fmt: skip
    completed = local_ledger.audit("rag")[-1]
    assert completed.event_type == "StreamCompleted"
    assert completed.changes["added"][0]["additional_kwargs"] == extra


def test_a_streaming_chat_response_is_teed(local_ledger: Ledger) -> None:
    response = SimpleChatEngine.from_defaults(llm=MockLLM()).stream_chat("tell me a story")
    tokens = list(tee_response(local_ledger, "chat", response))
    assert "".join(tokens) and local_ledger.get_all("chat")[0].content == "".join(tokens)
    assert local_ledger.get_all("chat")[0].additional_kwargs["sources"] == []


def test_plain_tokens_sync_and_async(local_ledger: Ledger) -> None:
    assert list(tee_tokens(local_ledger, "t", iter(["a", "b", "c"]))) == ["a", "b", "c"]

    async def tokens() -> AsyncIterator[str]:
        for t in ["x", "y"]:
            yield t

    async def consume() -> list[str]:
        return [t async for t in atee_tokens(local_ledger, "t", tokens())]

    assert asyncio.run(consume()) == ["x", "y"]
    assert [m.content for m in local_ledger.get_all("t")] == ["abc", "xy"]
    early = tee_tokens(local_ledger, "early", iter(["seen", "unseen"]))
    assert next(early) == "seen"
    early.close()
    last = local_ledger.audit("early")[-1]
    assert last.changes["cause"] == "client_gone" and last.changes["partial"] == "seen"
