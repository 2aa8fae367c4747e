"""A scripted model for agents run with no network: asked "weather <city>" it thinks (a
reasoning item) and calls the `weather` tool; shown the tool's output, it answers with
it; asked anything else, it answers "You said: ...". Each call's input is kept."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

from agents import Model, ModelResponse, Usage
from openai.types.responses import (
    ResponseFunctionToolCall,
    ResponseOutputMessage,
    ResponseOutputText,
    ResponseReasoningItem,
)
from openai.types.responses.response_reasoning_item import Summary


class WeatherModel(Model):
    def __init__(self) -> None:
        self.inputs: list[list[Any]] = []

    async def get_response(self, system_instructions: Any, input: Any, *args: Any,
                           **kwargs: Any) -> ModelResponse:  # fmt: skip
        items = [{"role": "user", "content": input}] if isinstance(input, str) else input
        self.inputs.append(json.loads(json.dumps(items)))
        turn = len(self.inputs)
        last = items[-1]
        if last.get("type") == "function_call_output":
            return _response(_message(f"It is {last['output']}.", turn))
        text = str(last.get("content", ""))
        if text.startswith("weather "):
            city = text.removeprefix("weather ")
            thought = ResponseReasoningItem(
                id=f"rs_{turn}", type="reasoning",
                summary=[Summary(type="summary_text", text=f"The user wants {city}'s weather.")],
            )  # fmt: skip
            call = ResponseFunctionToolCall(
                id=f"fc_{turn}", call_id=f"call_{turn}", type="function_call", name="weather",
                arguments=json.dumps({"city": city}, ensure_ascii=False), status="completed",
            )  # fmt: skip
            return _response(thought, call)
        return _response(_message(f"You said: {text}", turn))

    def stream_response(self, *args: Any, **kwargs: Any) -> AsyncIterator[Any]:
        raise NotImplementedError("this model answers whole responses only")


def _message(text: str, turn: int) -> ResponseOutputMessage:
    return ResponseOutputMessage(
        id=f"msg_{turn}", type="message", role="assistant", status="completed",
        content=[ResponseOutputText(type="output_text", text=text, annotations=[])],
    )  # fmt: skip


def _response(*output: Any) -> ModelResponse:
    return ModelResponse(output=list(output), usage=Usage(), response_id=None)
