"""What the model was given, kept with its answer: tool outputs and retrieved nodes as
JSON, within a byte budget.

A tool output keeps its name, input, `content`, `raw_output` (made JSON-able: pydantic
models dumped, dataclasses by field, anything else as its `str()`) and error flag; a
source node its id, score, text and metadata. The large parts (content, raw output,
text, metadata) share one budget of `max_provenance_bytes` (UTF-8 bytes of their JSON),
spent in order; a part that does not fit is cut, and says so: `"cut": {"text": 51234}`
names each cut part with its full size, and a cut raw output or metadata becomes the
start of its JSON text.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from llama_index.core.schema import MetadataMode, NodeWithScore
from llama_index.core.tools.types import ToolOutput
from pydantic import BaseModel

MAX_DEPTH = 32  # deeper values (or cycles) are kept as their str()


class ProvenanceBudget:
    """Bytes left for the large parts of one answer's provenance."""

    def __init__(self, max_bytes: int) -> None:
        self.left = max_bytes

    def keep(self, item: dict[str, Any], name: str, value: Any) -> None:
        """Set `item[name]` to `value`, or to what fits of it (noting the cut)."""
        text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
        size = len(text.encode("utf-8"))
        if size <= self.left:
            item[name] = value
            self.left -= size
            return
        kept = text.encode("utf-8")[: self.left].decode("utf-8", errors="ignore")
        self.left -= len(kept.encode("utf-8"))
        item[name] = kept
        item.setdefault("cut", {})[name] = size


def jsonable(value: Any, depth: int = 0) -> Any:
    """`value` as plain JSON values."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if value == value and abs(value) != float("inf") else str(value)
    if depth >= MAX_DEPTH:
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): jsonable(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [jsonable(v, depth + 1) for v in value]
    if isinstance(value, BaseModel):
        try:
            return jsonable(value.model_dump(mode="json"), depth + 1)
        except Exception:  # a model whose fields do not serialize: its text
            return str(value)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = dataclasses.fields(value)
        return {f.name: jsonable(getattr(value, f.name), depth + 1) for f in fields}
    return str(value)


def tool_outputs(outputs: Iterable[ToolOutput], budget: ProvenanceBudget) -> list[dict[str, Any]]:
    found = []
    for output in outputs:
        item: dict[str, Any] = {
            "tool_name": output.tool_name,
            "raw_input": jsonable(output.raw_input),
            "is_error": output.is_error,
        }
        budget.keep(item, "content", output.content)
        budget.keep(item, "raw_output", jsonable(output.raw_output))
        found.append(item)
    return found


def source_nodes(nodes: Sequence[NodeWithScore], budget: ProvenanceBudget) -> list[dict[str, Any]]:
    found = []
    for n in nodes:
        item: dict[str, Any] = {"node_id": n.node.node_id, "score": n.score}
        budget.keep(item, "text", n.node.get_content(metadata_mode=MetadataMode.NONE))
        budget.keep(item, "metadata", jsonable(n.node.metadata))
        found.append(item)
    return found


def provenance(
    sources: Iterable[ToolOutput], nodes: Sequence[NodeWithScore], max_bytes: int
) -> dict[str, Any]:
    """The `additional_kwargs` of an answer: its tool outputs and its source nodes."""
    budget = ProvenanceBudget(max_bytes)
    return {"sources": tool_outputs(sources, budget), "source_nodes": source_nodes(nodes, budget)}
