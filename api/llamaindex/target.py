"""The settings every adapter shares: where the sessions live, and how it serializes.

`url` is `http(s)://...` (a session-ledger server) or a database URL (`sqlite:///...`,
`postgresql://...`, opened in this process); or pass `ledger=` (an in-process Ledger).
Serialized adapters record the URL without any password and never the API key, only
its fingerprint: on restore the key is the one this process was given under that
fingerprint, else `api_key=` or the `LEDGER_API_KEY` environment variable (the same key);
a database password comes from `LEDGER_DATABASE_URL` (when it names the same database).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, Self, TypeVar

from llama_index.core.base.llms.types import ChatMessage as LlamaMessage
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from session_ledger.domain.ledger import Ledger

from . import plans
from .memory_backends import Backend, make_backend, without_password

T = TypeVar("T")


class LedgerTarget(BaseModel):
    """Where the sessions live; the base of LedgerChatStore, LedgerDBChatStore, LedgerMemory."""

    model_config = ConfigDict(arbitrary_types_allowed=True)

    url: str | None = Field(
        default=None,
        description="http(s):// URL of a session-ledger server, or a database URL for an "
        "in-process ledger; recorded without its password. None: `ledger=` was given.",
    )
    tenant: str | None = Field(
        default=None, description="In-process only: the tenant (default: the ledger's)."
    )
    actor: str | None = Field(
        default=None, description="In-process only: who the audit trail names as writer."
    )
    api_key_fingerprint: str | None = Field(
        default=None,
        description="Server only: which API key (the start of its sha256, never the key); "
        "a restore finds the key again by it (api_keys.py).",
    )
    _backend: Backend = PrivateAttr()

    def __init__(
        self, *, ledger: Ledger | None = None, api_key: str | None = None,
        tokenizer_fn: Callable[[str], Any] | None = None, backend: Backend | None = None,
        **data: Any,
    ) -> None:  # fmt: skip
        """`backend=` shares another adapter's connection (LedgerMemory's chat_store)."""
        url = data.get("url")
        if url is not None:
            data["url"] = without_password(url)
        backend = backend or make_backend(
            ledger=ledger, url=url, api_key=api_key, tenant=data.get("tenant"),
            actor=data.get("actor"), tokenizer=tokenizer_fn,
            saved_key=data.get("api_key_fingerprint"),
        )  # fmt: skip
        data["api_key_fingerprint"] = backend.key_fingerprint
        super().__init__(**data)
        self._backend = backend

    def to_dict(self, **kwargs: Any) -> dict[str, Any]:
        """The settings (no secret) and `class_name`, for `from_dict`."""
        return {**self.model_dump(**kwargs), "class_name": self.class_name()}  # type: ignore[attr-defined]

    @classmethod
    def from_dict(cls, data: dict[str, Any], **kwargs: Any) -> Self:
        """Restore; `kwargs` add what was not saved (`api_key=`, `ledger=`)."""
        data = {k: v for k, v in {**data, **kwargs}.items() if k != "class_name"}
        return cls(**data)

    def _run(self, plan: Callable[..., plans.Plan[T]], *args: Any, **kwargs: Any) -> T:
        return plans.run(self._backend, plan, *args, **kwargs)

    async def _arun(self, plan: Callable[..., plans.Plan[T]], *args: Any, **kwargs: Any) -> T:
        return await plans.arun(self._backend, plan, *args, **kwargs)


def to_wire(message: LlamaMessage | dict[str, Any]) -> dict[str, Any]:
    """A LlamaIndex message as the ledger stores it (LlamaIndex's own JSON dump)."""
    if not isinstance(message, LlamaMessage):
        message = LlamaMessage.model_validate(message)
    return message.model_dump(mode="json")


def to_wires(messages: Sequence[LlamaMessage | dict[str, Any]]) -> list[dict[str, Any]]:
    return [to_wire(m) for m in messages]


def from_wire(message: dict[str, Any] | None) -> LlamaMessage | None:
    return None if message is None else _llama_message(message)


def from_wires(messages: list[dict[str, Any]] | None) -> list[LlamaMessage]:
    return [_llama_message(m) for m in messages or []]


def _llama_message(stored: dict[str, Any]) -> LlamaMessage:
    """A stored message as LlamaIndex held it when it was put. A message made with the
    legacy `additional_kwargs={"images": [ImageDocument, ...]}` had an image block added
    for each then; its dump holds those blocks, and the documents as dicts, which the
    legacy conversion, run again by `model_validate`, cannot read (and would add twice).
    So the message is made without them and they are put back, as documents again."""
    extra = stored.get("additional_kwargs")
    if not isinstance(extra, dict) or not extra.get("images"):
        return LlamaMessage.model_validate(stored)
    images = extra["images"]
    message = LlamaMessage.model_validate(
        {**stored, "additional_kwargs": {k: v for k, v in extra.items() if k != "images"}}
    )
    documents = [_image_document(d) for d in images] if isinstance(images, list) else images
    kept = message.additional_kwargs  # (in place, in the stored order: no validator runs)
    rest = dict(kept)
    kept.clear()
    kept.update((k, documents if k == "images" else rest[k]) for k in extra)
    return message


def _image_document(value: Any) -> Any:
    """An `ImageDocument` again from its dump; any other value as it is."""
    from llama_index.core.schema import ImageDocument
    from pydantic import ValidationError

    if not isinstance(value, dict):
        return value
    try:
        return ImageDocument.model_validate(value)
    except ValidationError:
        return value
