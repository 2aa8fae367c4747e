"""Settings: every number that matters, read from `LEDGER_*` environment variables.

They come in six groups, one model each: the server (`ServerSettings`), the store
(`StoreSettings`), the limits (`LimitSettings`), the read replicas (`ReplicaSettings`),
streams and live tails (`StreamSettings`) and the evidence (`EvidenceSettings`).
`Settings` is all six, read from the environment, and is what the composition root
(bootstrap.py), `create_app` and the commands take; a part that needs one group takes
that group's type. A setting's variable is `LEDGER_` and its name, whatever its group.

Each default is written once. One the domain or the projections own (a ledger's token
limit, a write's size limits, a standby's allowed lag, ...) is taken from their constant
rather than repeated (tests/unit/test_settings_defaults.py holds them together).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal, Self

from pydantic import BaseModel, Field, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from session_ledger.domain import tuning
from session_ledger.domain.inputs import Limits
from session_ledger.projections import replicas


class ServerSettings(BaseModel):
    """What `serve` binds and runs, and what a server process serves (`serve`, create_app)."""

    host: str = Field("127.0.0.1", description="Address `serve` binds.")
    port: int = Field(8080, ge=1, le=65535, description="Port `serve` binds.")
    workers: int = Field(1, ge=1, description="uvicorn worker processes for `serve`.")
    access_log: bool = Field(
        True,
        description="`serve` logs a line per request (uvicorn's access log). Set false "
        "where a proxy logs requests: a busy server then answers 10-30% more requests.",
    )
    log_format: Literal["plain", "json"] = Field(
        "plain",
        description="`serve`'s log lines: `plain` (uvicorn's text) or `json` (one object a "
        "line, with the request id also answered in `X-Request-ID`).",
    )
    otel_exporter: Literal["none", "otlp", "console"] = Field(
        "none",
        description="OpenTelemetry spans of requests and store calls: `otlp` (HTTP, to "
        "`OTEL_EXPORTER_OTLP_ENDPOINT`) or `console`; needs the `otel` extra.",
    )
    otel_service_name: str = Field(
        "session-ledger", description="The `service.name` the spans are reported under."
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
    ui: bool = Field(
        True,
        description="Serve the audit viewer at /ui (browse, replay, diff, verify, export "
        "in a browser, signed in with an API key). Set false to serve the API only.",
    )
    docs: bool = Field(
        False,
        description="Serve Swagger UI at /docs (one pinned release from a public CDN, checked "
        "by its hash). /openapi.json is served either way.",
    )
    retry_after_seconds: int = Field(
        2, ge=0, description="`Retry-After` of a 503 answer while the store is unavailable."
    )
    loop_write_max_bytes: int = Field(
        64 * 1024,
        ge=0,
        description="Largest request body of a write that may run on the event loop (bytes): "
        "a larger one runs in a worker thread, since its parsing, token counts, hashing and "
        "sealing grow with its size and would hold every other request meanwhile.",
    )
    token_count_process_chars: int = Field(
        256 * 1024,
        ge=0,
        description="A message at least this long (characters) is counted by cl100k_base in "
        "a worker process of the server: the count holds the GIL (40-80 ms for 4 MiB), and "
        "with it the event loop. 0: every count in the server's process. An in-process "
        "ledger counts in its host's process.",
    )


class StoreSettings(BaseModel):
    """The store and the ledger over it: where it is, its connections and locks, the
    write state kept, the defaults of in-process calls, encryption at rest."""

    database_url: str = Field(
        "sqlite:///./var/ledger.db",
        description="Store URL: memory://, sqlite:///path/ledger.db or postgresql://user@host/db.",
    )
    auto_migrate: bool = Field(
        True,
        description="An in-process ledger (`open_ledger`, `LedgerMemory(url=...)`) creates "
        "the tables of a new store on first use. Set false to require an explicit `migrate`.",
    )
    partitions: int | None = Field(
        None,
        ge=2,
        le=1024,
        description="`migrate` lays the PostgreSQL events and views out in this many hash "
        "partitions by session, copying an existing store (docs/operations.md).",
    )
    pool_size: int = Field(
        8,
        ge=1,
        description="Most PostgreSQL connections per process and pool, opened as calls "
        "need them (one kept open; the others closed after 10 idle minutes); a server has "
        "as many more on its event loop (context reads, and a write alone). SQLite: "
        "connections the key and the limit tables each keep open (a request finding all "
        "busy waits for one).",
    )
    lock_timeout_seconds: int = Field(
        30, ge=1, description="How long a write waits for a database lock."
    )
    store_wait_seconds: int = Field(
        5,
        ge=1,
        description="How long a request waits for a PostgreSQL connection before it "
        "answers 503 store_unavailable (an outage fails fast instead of piling up requests).",
    )
    allow_unsafe_durability: bool = Field(
        False,
        description="Start even when the store can lose acknowledged writes (PostgreSQL "
        "fsync, synchronous_commit or full_page_writes off; SQLite not WAL with "
        "synchronous=FULL). Only for throwaway data.",
    )
    default_tenant: str = Field(
        tuning.DEFAULT_TENANT, description="Tenant used by in-process calls."
    )
    tokenizer: str = Field(
        tuning.TOKENIZER,
        description="Tokenizer for stored token counts: cl100k_base (tiktoken's counts, made "
        "in linear time by the bpe crate where installed; offline) or whitespace.",
    )
    token_limit: int = Field(tuning.TOKEN_LIMIT, ge=1, description="Default token limit of `get`.")
    write_retries: int = Field(
        tuning.WRITE_RETRIES, ge=1, description="Attempts of a write that races other writers."
    )
    aggregate_cache_size: int = Field(
        10_000, ge=0, description="Sessions whose write state is cached per process."
    )
    snapshot_interval: int = Field(
        tuning.SNAPSHOT_INTERVAL,
        ge=2,
        description="A snapshot of a session's write state every N events.",
    )
    master_key: str | None = Field(
        None,
        description="Encryption at rest: base64 of a 32-byte AES-256 master key, or "
        "`id:base64,id:base64` (oldest first; the last wraps new data keys). Unset: "
        "stored clear, and erasure is refused.",
    )
    master_key_file: str | None = Field(
        None, description="A file holding `master_key`'s value (instead of it)."
    )

    @field_validator("database_url")
    @classmethod
    def _a_store_url(cls, value: str) -> str:
        """Every command and store reads one URL alike: a form none knows is refused here
        (`sqlite://name` too, which one would have read as a path and another refused)."""
        if value.startswith(("memory://", "sqlite:///", "postgresql://", "postgres://")):
            return value
        scheme = value.split(":", 1)[0] if ":" in value else value[:20]
        hint = " (three slashes, then the path)" if scheme == "sqlite" else ""
        raise ValueError(  # (the scheme only: a URL may hold a password)
            f"unsupported database URL (scheme {scheme!r}): use memory://, sqlite:///path"
            f"{hint}, or postgresql://user@host/db"
        )


class LimitSettings(BaseModel):
    """What one write, read or request may hold, and what a key, a tenant or a client
    address may send (rate limits, quotas)."""

    max_message_bytes: int = Field(
        Limits.max_message_bytes, ge=1, description="Largest message (canonical JSON, bytes)."
    )
    max_messages_per_write: int = Field(
        Limits.max_messages_per_write, ge=1,
        description="Most messages in one put_messages / set, or deltas in one stream batch.",
    )  # fmt: skip
    max_write_bytes: int = Field(
        Limits.max_write_bytes, ge=1, description="Largest write (all its messages, bytes)."
    )
    max_provenance_bytes: int = Field(
        Limits.max_provenance_bytes,
        ge=0,
        description="What a recorded answer keeps of the tool outputs and retrieved nodes "
        "it was given (bytes; the rest is cut, and the cut recorded).",
    )
    max_page_messages: int = Field(
        Limits.max_page_messages,
        ge=1,
        description="Most messages in one page of the history (GET .../messages): the page "
        "size when no `limit` is given, and the most a `limit` gets.",
    )
    max_answer_bytes: int = Field(
        Limits.max_answer_bytes,
        ge=1,
        description="Most bytes of messages one read answers: a page of the history ends "
        "before them (its first message whatever its size); a context window over them is "
        "refused (413 answer_too_large).",
    )
    max_body_bytes: int = Field(
        40 * 1024 * 1024, ge=1, description="Largest HTTP request body (bytes)."
    )
    max_package_builds: int = Field(
        2, ge=1,
        description="Tenant packages (`GET /v1/package`, tar and RSMF together) one server "
        "process builds at once; one more is refused with 429 too_many_package_builds.",
    )  # fmt: skip
    rate_limit_key_per_second: float = Field(
        1000, ge=0, allow_inf_nan=False,
        description="Requests a second one API key may make, sustained (0 or none: no limit).",
    )  # fmt: skip
    rate_limit_key_burst: int = Field(
        2000, ge=0, description="Requests one API key may make at once, above its rate."
    )
    rate_limit_tenant_per_second: float = Field(
        5000, ge=0, allow_inf_nan=False,
        description="Requests a second all keys of one tenant may make (0 or none: no limit).",
    )  # fmt: skip
    rate_limit_tenant_burst: int = Field(
        10_000, ge=0, description="Requests one tenant may make at once, above its rate."
    )
    rate_limit_lease: float = Field(
        0.1, ge=0, lt=1, allow_inf_nan=False,
        description="Share of a burst one process takes of a shared bucket at once, then "
        "admits from memory (0: every limited request asks the store).",
    )  # fmt: skip
    quota_key_write_bytes_per_day: int = Field(
        10 * 1024**3, ge=0,
        description="Bytes of write bodies one API key may send in 24 hours, refilled "
        "continuously (0 or none: no quota).",
    )  # fmt: skip
    quota_tenant_write_bytes_per_day: int = Field(
        100 * 1024**3, ge=0,
        description="Bytes of write bodies all keys of one tenant may send in 24 hours "
        "(0 or none: no quota).",
    )  # fmt: skip
    quota_tenant_sessions: int = Field(
        1_000_000, ge=0, description="Sessions one tenant may hold (0 or none: no quota)."
    )
    auth_failures_per_second: float = Field(
        1, ge=0, allow_inf_nan=False,
        description="Failed authentications (an unknown or revoked API key) a second one "
        "client address may make, sustained; beyond its burst they answer 429 (0 or none: "
        "no limit).",
    )  # fmt: skip
    auth_failures_burst: int = Field(
        100, ge=1, description="Failed authentications one client address may make at once."
    )

    @field_validator(
        "rate_limit_key_per_second", "rate_limit_tenant_per_second",
        "quota_key_write_bytes_per_day", "quota_tenant_write_bytes_per_day",
        "quota_tenant_sessions", "auth_failures_per_second", mode="before",
    )  # fmt: skip
    @classmethod
    def _none_is_off(cls, value: Any) -> Any:
        if value is None or (isinstance(value, str) and value.strip().lower() == "none"):
            return 0
        return value

    @model_validator(mode="after")
    def _bursts_hold_a_request(self) -> Self:
        for scope in ("key", "tenant"):
            rate = getattr(self, f"rate_limit_{scope}_per_second")
            if rate and getattr(self, f"rate_limit_{scope}_burst") < 1:
                raise ValueError(
                    f"LEDGER_RATE_LIMIT_{scope.upper()}_BURST must be at least 1 when "
                    f"LEDGER_RATE_LIMIT_{scope.upper()}_PER_SECOND is set (0 turns it off)"
                )
        return self


class ReplicaSettings(BaseModel):
    """PostgreSQL standbys that serve reads (projections/replicas.py)."""

    read_database_urls: str = Field(
        "",
        description="PostgreSQL standbys that serve reads, comma separated "
        "(postgresql://...); writes, and reads that must see a write, go to the primary.",
    )
    replica_max_lag_seconds: float = Field(
        replicas.MAX_LAG_SECONDS, gt=0, allow_inf_nan=False,
        description="A standby that trails the primary by more than this serves no reads "
        "until it catches up.",
    )  # fmt: skip
    replica_wait_ms: int = Field(
        replicas.WAIT_MS, ge=0,
        description="How long a read that must see a version (min_version, If-None-Match, "
        "this process's own write) waits for a standby to replay it before the primary answers.",
    )  # fmt: skip
    replica_check_seconds: float = Field(
        replicas.CHECK_SECONDS, gt=0, allow_inf_nan=False,
        description="How often each standby's lag and health are checked.",
    )  # fmt: skip


class StreamSettings(BaseModel):
    """Streamed messages and live tails."""

    stream_flush_bytes: int = Field(
        tuning.STREAM_FLUSH_BYTES,
        ge=1,
        description="A stream's deltas are recorded once this many bytes wait.",
    )
    stream_flush_ms: int = Field(
        tuning.STREAM_FLUSH_MS,
        ge=0,
        description="...or once this many ms passed since the last batch.",
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
    tail_max_per_key: int = Field(
        16, ge=1,
        description="Live tails one API key may hold open at once in one server process; "
        "one more is refused with 429 too_many_tails.",
    )  # fmt: skip
    tail_max_per_tenant: int = Field(
        64, ge=1,
        description="Live tails all keys of one tenant may hold open at once in one server "
        "process; one more is refused with 429 too_many_tails.",
    )  # fmt: skip
    tail_max_seconds: float = Field(
        3600, gt=0, allow_inf_nan=False,
        description="A live tail ends after this long; the client reconnects with "
        "Last-Event-ID and misses nothing.",
    )  # fmt: skip
    tail_key_check_ms: int = Field(
        250, ge=10,
        description="How often the server looks whether a key holding live tails was "
        "revoked (its tails then end).",
    )  # fmt: skip
    feed_cursor_key: str | None = Field(
        None, min_length=16,
        description="Secret that seals the tenant tail's positions (`id:`) into opaque "
        "cursors; every server of a store needs the same. Unset: a random secret kept in "
        "the store, made on first start (set it to share cursors across stores, or to "
        "rotate them by hand).",
    )  # fmt: skip


class EvidenceSettings(BaseModel):
    """The evidence kept beside the sessions: the access log, retention, signed checkpoints."""

    log_agent_reads: bool = Field(
        False,
        description="Record agents' reads of windows, transcripts and audit trails in the "
        "access log too (auditors', admins' reads and every export always are). Off: an "
        "agent reads its window every turn, as many entries as messages.",
    )
    retention: str = Field(
        "",
        description="Retention rules for `retention apply`: `tenant:prefix:days` items "
        "separated by commas (a prefix may be empty), e.g. `default:request/:1`.",
    )
    retention_interval_minutes: float = Field(
        0,
        ge=0,
        description="`serve` applies the retention rules every N minutes (0: only "
        "`session-ledger retention apply` does). Safe with several servers: an erasure "
        "another one made first is skipped.",
    )
    signing_key_file: Path | None = Field(
        None,
        description="Ed25519 private key (PEM) that signs checkpoints; kept outside the "
        "database (`session-ledger checkpoint-keys` makes a pair).",
    )
    checkpoint_dir: Path = Field(
        Path("./var/checkpoints"),
        description="Where signed checkpoints are written (a folder per tenant) and "
        "`GET /v1/checkpoints/latest` reads them.",
    )
    checkpoint_interval_minutes: float = Field(
        0,
        ge=0,
        description="`serve` signs a checkpoint of every tenant every N minutes (0: only "
        "`session-ledger checkpoint` makes them).",
    )


class Settings(
    ServerSettings, StoreSettings, LimitSettings, ReplicaSettings, StreamSettings,
    EvidenceSettings, BaseSettings,
):  # fmt: skip
    """Configuration of one session-ledger process (see the README's table): every
    group's settings, each read from its `LEDGER_*` variable, or given by name
    (`Settings(database_url=...)`), which overrides the variable.

    The groups are data only (fields and their checks), so their union is one flat model:
    `settings.database_url`, and a `Settings` is each group wherever one is asked for."""

    model_config = SettingsConfigDict(env_prefix="LEDGER_", extra="ignore")


GROUPS: dict[str, type[BaseModel]] = {
    "server": ServerSettings, "stores": StoreSettings, "limits": LimitSettings,
    "replicas": ReplicaSettings, "streams": StreamSettings, "evidence": EvidenceSettings,
}  # fmt: skip
