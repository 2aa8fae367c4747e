"""OpenAI Agents items as ledger messages, and back, exactly.

An item of the Responses API (a message, a function call or its output, a reasoning item,
a computer, shell, MCP or tool-search item, or a type not yet known) is stored as one
ledger message:

- `{"role": "user" | "assistant" | "system" | "developer", "content": "<text>"}` and no
  other key (the easy input message, most items) is a message of that role with one text
  block: read back, it is the same two keys.
- Any other item is kept whole under `additional_kwargs["openai_item"]`, beside one text
  block (what the viewer shows and the tokenizer counts, `item_text`) and a role
  (`item_role`: the context window never opens on a tool output or an assistant turn).

Read back, an item is the stored JSON value: equal to the one given, byte for byte after
canonical ordering (`canonical_item`). What is not plain JSON is refused with
`InvalidItem`, before anything is stored.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from session_ledger.domain.errors import InvalidMessage
from session_ledger.domain.messages import ChatMessage

ITEM_KEY = "openai_item"
MESSAGE_ROLES = frozenset({"user", "assistant", "system", "developer"})
TOOL_ROLE, CALL_ROLE = "tool", "assistant"
_TEXT_PARTS = ("text", "refusal")  # the keys a content part's words are under


class InvalidItem(InvalidMessage, TypeError):
    """An item is not a JSON object of JSON values (TypeError too: what `json.dumps`
    raises for such an item, and so SQLiteSession)."""


def item_role(item: Mapping[str, Any]) -> str:
    """The ledger role of an item: a message's own role; "tool" for a tool's output (a
    type ending in `_output`); "assistant" for every other item (calls, reasoning)."""
    role = item.get("role")
    if type(role) is str and role in MESSAGE_ROLES:
        return role
    kind = item.get("type")
    return TOOL_ROLE if isinstance(kind, str) and kind.endswith("_output") else CALL_ROLE


def item_text(item: Mapping[str, Any]) -> str:
    """What counts as an item's words (its tokens, the viewer's text).

    A message: its content (a string, or its text and refusal parts joined by newlines,
    other parts as `[type]`). A tool output: its output the same way. A function or
    custom tool call: `name(arguments)`. A reasoning item: its summary's texts. Any other
    item (computer, shell, web or file search, MCP, tool search, or unknown): its
    canonical JSON.
    """
    kind = item.get("type")
    if "content" in item and kind in (None, "message"):
        return _parts_text(item["content"])
    if "output" in item and isinstance(kind, str) and kind.endswith("_output"):
        return _parts_text(item["output"])
    if kind in ("function_call", "custom_tool_call"):
        arguments = item.get("arguments", item.get("input", ""))
        return f"{item.get('name', '')}({arguments if isinstance(arguments, str) else ''})"
    if kind == "reasoning" and isinstance(item.get("summary"), list):
        return _parts_text(item["summary"])
    return canonical_item(item)


def _parts_text(content: object) -> str:
    if isinstance(content, str):
        return content
    if not isinstance(content, list):
        return json.dumps(content, sort_keys=True, ensure_ascii=False)
    words = []
    for part in content:
        if isinstance(part, Mapping):
            text = next((part[k] for k in _TEXT_PARTS if isinstance(part.get(k), str)), None)
            words.append(text if text is not None else f"[{part.get('type', 'part')}]")
        elif isinstance(part, str):
            words.append(part)
    return "\n".join(words)


def to_message(item: object) -> dict[str, Any]:
    """The ledger message that keeps `item` (unchecked: the ledger checks, or `check`)."""
    if type(item) is not dict:
        if not isinstance(item, Mapping):
            raise InvalidItem(f"an item must be a JSON object, not {type(item).__name__}")
        item = dict(item)
    content, role = item.get("content"), item.get("role")
    if len(item) == 2 and type(content) is str and type(role) is str and role in MESSAGE_ROLES:
        return {"role": role, "content": content}
    try:
        text = item_text(item)
    except (TypeError, ValueError) as e:  # (a value JSON cannot hold)
        raise InvalidItem(f"the item holds a value that is not JSON: {e}") from None
    except RecursionError:  # (nested past what the ledger takes, and past what json can)
        raise InvalidItem("the item is nested too deeply to be stored") from None
    return {
        "role": item_role(item),
        "blocks": [{"block_type": "text", "text": text}],
        "additional_kwargs": {ITEM_KEY: item},
    }


def to_messages(items: object) -> list[dict[str, Any]]:
    """The messages of a list of items; InvalidItem (naming its index) for a bad one."""
    if isinstance(items, str | bytes | Mapping) or not isinstance(items, list | tuple):
        raise InvalidItem(f"items must be a list of items, not {type(items).__name__}")
    messages = []
    for i, item in enumerate(items):
        try:
            messages.append(to_message(item))
        except InvalidItem as e:
            raise InvalidItem(f"items[{i}]: {e}", index=i) from None
    return messages


def check(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The messages as the ledger will store them (`ChatMessage.parse`), for a write sent
    over HTTP: a bad item is refused here, as in process, not sent."""
    checked = []
    for i, message in enumerate(messages):
        try:
            checked.append(ChatMessage.parse(message).to_dict())
        except InvalidMessage as e:
            raise as_invalid_item(e, i) from None
    return checked


def as_invalid_item(error: InvalidMessage, index: int | None = None) -> InvalidItem:
    """The ledger's refusal of a message, as the refusal of its item."""
    index = error.index if index is None else index
    text = str(error).replace("additional_kwargs.openai_item", "item")
    if index is not None and not text.startswith("messages["):
        text = f"items[{index}]: {text}"
    return InvalidItem(text.replace("messages[", "items[", 1), index=index)


def from_message(message: Mapping[str, Any]) -> Any:
    """The item a stored message keeps (a message written otherwise: role and text)."""
    kwargs = message.get("additional_kwargs") or {}
    if ITEM_KEY in kwargs:
        return kwargs[ITEM_KEY]
    texts = [b["text"] for b in message.get("blocks", ()) if b.get("block_type") == "text"]
    return {"role": message["role"], "content": "\n".join(texts)}


def from_chat_message(message: ChatMessage) -> Any:
    """`from_message` of a message as a read made it (no JSON made and decoded again)."""
    kwargs = message.additional_kwargs
    if ITEM_KEY in kwargs:
        return kwargs[ITEM_KEY]
    return {"role": message.role, "content": message.content or ""}


def canonical_item(item: object) -> str:
    """An item's canonical JSON (keys sorted, compact, UTF-8): two items are the same
    when these are equal."""
    return json.dumps(item, sort_keys=True, ensure_ascii=False, separators=(",", ":"))
