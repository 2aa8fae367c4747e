"""Request and response bodies of the HTTP API (pydantic models live at the edge only).

The client (`client.py`) parses responses into the same models, so the wire format
is written down once.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema

from session_ledger.domain import ports
from session_ledger.domain.messages import BLOCK_TYPES, ROLES

Role = Literal["agent", "auditor", "admin"]


OTHER_BLOCK_TYPES = [t for t in BLOCK_TYPES if t != "text"]
# Documents what the domain checks (blocks stay plain dicts, so they reach it untouched).
BLOCKS_SCHEMA: dict[str, Any] = {
    "type": "array",
    "items": {
        "anyOf": [
            {"type": "object", "required": ["block_type", "text"],
             "properties": {"block_type": {"const": "text"}, "text": {"type": "string"}}},
            {"type": "object", "required": ["block_type"],
             "properties": {"block_type": {"enum": OTHER_BLOCK_TYPES}}},
        ]
    },
}  # fmt: skip


# Messages are validated once, by the domain (`ChatMessage.parse`, whose errors name the
# message and the field); the API's schema documents the two shapes it accepts.
MESSAGE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "description": "A chat message: LlamaIndex's shape (`blocks`) or the plain one "
    "(`content`: text, blocks or null); not both.",
    "required": ["role"],
    "additionalProperties": False,
    "properties": {
        "role": {"enum": list(ROLES)},
        "blocks": {**BLOCKS_SCHEMA, "description": 'LlamaIndex content blocks, e.g. '
                   '[{"block_type": "text", "text": "hi"}].'},
        "content": {"anyOf": [{"type": "string"}, BLOCKS_SCHEMA, {"type": "null"}],
                    "description": "Text, or a list of content blocks like `blocks`."},
        "additional_kwargs": {"type": "object"},
    },
    "not": {"required": ["blocks", "content"]},
}  # fmt: skip
MessageIn = Annotated[dict[str, Any], WithJsonSchema(MESSAGE_SCHEMA)]


class Message(BaseModel):
    """A stored chat message, always in LlamaIndex's canonical JSON shape."""

    role: str
    blocks: list[dict[str, Any]]
    additional_kwargs: dict[str, Any]


class MessagesIn(BaseModel):
    """Messages to append (POST) or the complete new history (PUT)."""

    model_config = ConfigDict(extra="forbid")

    messages: list[MessageIn]


class AppendIn(MessagesIn):
    """Messages to append: at least one."""

    messages: list[MessageIn] = Field(min_length=1)


class WriteAnswer(BaseModel):
    """What a write did: the session's new version and its active message count."""

    version: int
    message_count: int
    replayed: bool = Field(
        description="True when this is the stored answer to a retried Idempotency-Key."
    )
    removed: list[Message] = Field(
        default_factory=list, description="The messages a delete removed."
    )


class ArchiveIn(BaseModel):
    """How many of the oldest active messages to move to the archive."""

    model_config = ConfigDict(extra="forbid")

    # Strict: a JSON integer, not "3", true or 3.0 (which lax validation would take).
    count: int = Field(ge=1, le=2**62, strict=True)


class EraseIn(BaseModel):
    """Why a session is erased, and on what legal ground (both kept in its audit trail)."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=4096)
    basis: str = Field(min_length=1, max_length=4096, examples=["GDPR art. 17"])


class HoldIn(BaseModel):
    """A legal hold's reference (matter, ticket) and why it is placed or released."""

    model_config = ConfigDict(extra="forbid")

    reference: str = Field(min_length=1, max_length=4096)
    reason: str = Field(min_length=1, max_length=4096)


class AuditEvent(BaseModel):
    """One change to a session: which, by whom, why, when, and what it did."""

    version: int
    event_type: str
    recorded_at: datetime
    actor: str
    reason: str | None
    idempotency_key: str | None
    changes: dict[str, Any] = Field(
        description='What the event did, e.g. {"added": [messages]}, {"removed": [...]}, '
        '{"kept": n, "removed": [...], "added": [...]}, {"cleared": n}, {"archived": n}.'
    )


class FeedEvent(AuditEvent):
    """One change to one of the tenant's sessions, on the tenant-wide live tail."""

    key: str


class AuditTrailAnswer(BaseModel):
    """A page of a session's events, oldest first; pass `next_after` as `after` for more."""

    events: list[AuditEvent]
    next_after: int | None


class MessageList(BaseModel):
    """Messages of one session, oldest first."""

    messages: list[Message]


class MessagePage(MessageList):
    """A page of a session's history, oldest first, and where the next one starts."""

    next_cursor: str | None = Field(
        None,
        description="Pass as `cursor` for the next page, of the same version as this one "
        "(the ETag); null on the last page.",
    )


class SessionHeadAnswer(BaseModel):
    """A session's summary: version, counts and timestamps."""

    key: str
    version: int
    message_count: int
    archived_count: int
    token_total: int
    created_at: datetime
    updated_at: datetime
    last_event: str = Field(description="The type of the session's latest event.")


class SessionKeys(BaseModel):
    """One page of session keys, sorted; pass `next_cursor` as `cursor` for the next."""

    keys: list[str]
    next_cursor: str | None


class KeyCreate(BaseModel):
    """A new API key for the caller's tenant."""

    model_config = ConfigDict(extra="forbid")

    role: Role
    name: str = Field(
        "", max_length=200, pattern=r"^[^\x00-\x1f\x7f-\x9f]*$",
        description="A label for people, e.g. the agent's name (no control characters).",
    )  # fmt: skip


class ApiKey(BaseModel):
    """An API key's record; the secret itself is never shown again after creation."""

    id: str
    tenant: str
    role: Role
    name: str
    created_at: datetime
    revoked_at: datetime | None


class CreatedApiKey(ApiKey):
    """A freshly created key: `key` is its secret, shown this once."""

    key: str


class ApiKeyList(BaseModel):
    """The keys of the caller's tenant, revoked ones included."""

    keys: list[ApiKey]


class ErrorBody(BaseModel):
    """The one error shape: a stable machine code, a message for people, details."""

    code: str
    message: str
    details: dict[str, Any] = Field(default_factory=dict)


class ErrorResponse(BaseModel):
    """Every 4xx/5xx answer of the API."""

    error: ErrorBody


class Status(BaseModel):
    """Liveness / readiness answer."""

    status: Literal["ok", "ready"]


class SessionSummary(SessionHeadAnswer):
    """A session's head and status, as the sessions list (or a replay) shows it."""

    status: Literal["active", "cleared"] = Field(
        description="cleared: the session's last change (at this version) was a reset."
    )

    @classmethod
    def of(cls, head: ports.SessionHead) -> SessionSummary:
        cleared = head.last_event == "HistoryCleared"
        return cls(
            key=head.key, version=head.version, message_count=head.message_count,
            archived_count=head.archived_count, token_total=head.token_total,
            created_at=head.created_at, updated_at=head.updated_at, last_event=head.last_event,
            status="cleared" if cleared else "active",
        )  # fmt: skip


class SessionSummaries(BaseModel):
    """One page of sessions with their heads, sorted by key; `next_cursor` as `cursor`."""

    sessions: list[SessionSummary]
    next_cursor: str | None


class ChainCheck(BaseModel):
    """The session's hash chain recomputed from its stored events, against the stored one."""

    intact: bool
    versions: int = Field(description="Events that checked out, up to the first bad one.")
    head: str | None = Field(description="Hex hash of the last event that checked out.")
    first_bad_version: int | None
    problem: str | None


class ContextWindow(BaseModel):
    """The context window `get` gives for a token limit, with its token count."""

    token_limit: int
    initial_token_count: int
    token_count: int = Field(
        description="What the window costs, counted as ChatMemoryBuffer counts it "
        "(initial_token_count included)."
    )
    messages: list[Message]


class Replay(BaseModel):
    """A session as it stood at one version: its head then and the window `get` gave."""

    session: SessionSummary
    window: ContextWindow


class HistoryChange(BaseModel):
    """One run of messages that differs between two versions of the history."""

    kind: Literal["added", "removed", "replaced"]
    from_position: int = Field(description="Where the run starts in the older history.")
    to_position: int = Field(description="Where the run starts in the newer history.")
    removed: list[Message]
    added: list[Message]


class HistoryDiff(BaseModel):
    """What changed in the active history from one version to another."""

    from_version: int
    to_version: int
    from_count: int
    to_count: int
    changes: list[HistoryChange]
