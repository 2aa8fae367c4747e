"""Settings: every number that matters, read from `LEDGER_*` environment variables."""

from __future__ import annotations

from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict


class Settings(BaseSettings):
    """Configuration of one session-ledger process (see the README's table)."""

    model_config = SettingsConfigDict(env_prefix="LEDGER_", extra="ignore")

    database_url: str = Field(
        "sqlite:///./var/ledger.db",
        description="Store URL: memory://, sqlite:///path/ledger.db or postgresql://user@host/db.",
    )
    host: str = Field("127.0.0.1", description="Address `serve` binds.")
    port: int = Field(8080, description="Port `serve` binds.")
    workers: int = Field(1, ge=1, description="uvicorn worker processes for `serve`.")
    access_log: bool = Field(
        True,
        description="`serve` logs a line per request (uvicorn's access log). Set false "
        "where a proxy logs requests: a busy server then answers 10-30% more requests.",
    )
    migrate_on_start: bool = Field(
        True,
        description="`serve` creates missing tables before it starts (under a lock, so "
        "racing processes are safe). Set false to require an explicit `migrate`.",
    )
    bootstrap_key: str | None = Field(
        None,
        description="Admin API key created on first start; if unset one is generated "
        "and printed once.",
    )
    default_tenant: str = Field("default", description="Tenant used by in-process calls.")
    tokenizer: str = Field(
        "cl100k_base",
        description="Tokenizer for stored token counts: cl100k_base (tiktoken, offline "
        "copy) or whitespace.",
    )
    token_limit: int = Field(3000, ge=1, description="Default token limit of `get`.")
    max_message_bytes: int = Field(
        4 * 1024 * 1024, ge=1, description="Largest message (canonical JSON, bytes)."
    )
    max_messages_per_write: int = Field(
        10_000, ge=1, description="Most messages in one put_messages / set."
    )
    max_write_bytes: int = Field(
        32 * 1024 * 1024, ge=1, description="Largest write (all its messages, bytes)."
    )
    max_body_bytes: int = Field(
        40 * 1024 * 1024, ge=1, description="Largest HTTP request body (bytes)."
    )
    write_retries: int = Field(
        100, ge=1, description="Attempts of a write that races other writers."
    )
    aggregate_cache_size: int = Field(
        10_000, ge=0, description="Sessions whose write state is cached per process."
    )
    snapshot_interval: int = Field(
        200, ge=2, description="A snapshot of a session's write state every N events."
    )
    pool_size: int = Field(8, ge=1, description="PostgreSQL connections per process.")
    lock_timeout_seconds: int = Field(
        30, ge=1, description="How long a write waits for a database lock."
    )
    stream_flush_bytes: int = Field(
        1024, ge=1, description="A stream's deltas are recorded once this many bytes wait."
    )
    stream_flush_ms: int = Field(
        250, ge=0, description="...or once this many ms passed since the last batch."
    )
    stream_timeout_seconds: float = Field(
        120,
        gt=0,
        description="An open stream with no event for this long is aborted "
        "(cause timeout) by the server, also one left open by a process that died.",
    )
    tail_poll_ms: int = Field(
        500,
        ge=10,
        description="How often a live tail reads the timeline when no "
        "notification came (SQLite: always; PostgreSQL: LISTEN/NOTIFY, this the catch-up).",
    )
    tail_heartbeat_seconds: float = Field(
        15, gt=0, description="A live tail sends a comment line when idle this long."
    )
    tail_batch: int = Field(
        100,
        ge=1,
        le=1000,
        description="Events a live tail reads and holds at once per "
        "client (its memory bound: a slow client is sent the next batch when it has "
        "taken this one).",
    )
