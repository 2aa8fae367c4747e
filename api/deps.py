"""Dependencies of the routes, as `Annotated` aliases: the ledger, the caller, the inputs
every session route shares (the session key in the path, the write preconditions).

Session keys travel percent-encoded as ONE path segment (`/` is `%2F`, a space `%20`,
UTF-8 bytes `%XX`); `middleware.RawSessionPath` keeps the segment encoded through routing,
and `decode_session_key` decodes it here, so a key may hold any character, `/` included.

Dependencies that do not block are `async def`: FastAPI runs a plain `def` dependency in
a worker thread, and a request paid one thread hand-off per dependency.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, Any, NamedTuple, TypeVar
from urllib.parse import unquote_to_bytes

from fastapi import Depends, Path, Request
from fastapi.concurrency import run_in_threadpool
from pydantic import Field, ValidatorFunctionWrapHandler, WrapValidator

from session_ledger.domain.errors import InvalidInput, InvalidSessionKey, SessionNotFound
from session_ledger.domain.ledger import Ledger
from session_ledger.projections.async_bridge import bridged
from session_ledger.projections.write_turns import TurnNotFree, without_waiting

from .auth import EXPORT, MANAGE_KEYS, READ, WRITE, Principal, key_store, require
from .http_errors import PreconditionFailed
from .keystore import KeyStore
from .route_inputs import RouteInputs

R = TypeVar("R")
BIG = 2**62  # larger numbers are no real position and would overflow the SQL column types
TEXT_PATTERN = r"^[^\x00-\x1f\x7f-\x9f]*$"  # no control characters, as the ledger demands
ETAG = re.compile(r'^\s*"(\d{1,18})"\s*$|^\s*(\d{1,18})\s*$')


def moment_in_range(value: datetime | None) -> datetime | None:
    """A time the stores can hold: its UTC moment within years 1 to 9999 (an offset can
    move `0001-01-01T00:00:00+01:00` before year 1, which no conversion survives)."""
    if value is None or value.tzinfo is None:  # no zone: UTC, as given
        return value
    try:
        return value.astimezone(UTC)
    except OverflowError:
        raise ValueError("the time in UTC must lie within years 1 to 9999") from None


_NUMBER = re.compile(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*")


def iso_moment(value: Any, parse: ValidatorFunctionWrapHandler) -> datetime | None:
    """A time given in ISO 8601 (a date alone: its midnight), within `moment_in_range`; a
    number is refused, which pydantic would read as seconds or milliseconds since 1970."""
    if isinstance(value, int | float) or (isinstance(value, str) and _NUMBER.fullmatch(value)):
        raise ValueError("a time is ISO 8601 (2026-11-24T10:00:00Z), not a number")
    return moment_in_range(parse(value))


# Every time a route takes goes through this check (`AsOfTime`, or `InRange` beside a Field of
# its own), so none reaches a store out of range or read from a number.
InRange = WrapValidator(iso_moment)
# Fields of the routes' `RouteInputs` models (route_inputs.py), each with the default None.
AsOfTime = Annotated[
    datetime | None,
    InRange,
    Field(description="Read the session as it was at this time (ISO 8601; no zone: UTC)."),
]
AsOfVersion = Annotated[
    int | None,
    Field(ge=1, le=BIG, description="Read the session as it was at this version (replay)."),
]


async def get_ledger(request: Request) -> Ledger:
    ledger: Ledger = request.app.state.ledger
    return ledger


def _alone(request: Request) -> bool:
    """Whether a store call may run on the event loop: the store answers from this process
    (`bootstrap.reads_in_process`, SQLite) and no other request is in flight, so a worker
    thread would only add its hand-off (two thread wake-ups) and nothing waits on the loop."""
    state = request.app.state
    return bool(state.reads_in_process) and state.metrics.in_flight <= 1


async def short_read(request: Request, read: Callable[[], R]) -> R:
    """Run a read of bounded size (a window, a head) on the event loop when it is alone
    (`_alone`), or, on PostgreSQL, under the loop's bridge (`store_bridged`), its waits on
    the server awaited. With other requests in flight on SQLite, a worker thread reads
    (SQLite lets go of the GIL) while the loop parses and sends on the other core. The
    hand-off is the standard library's (`asyncio.to_thread`, the loop's executor):
    anyio's, which FastAPI uses for a plain `def`, adds a cancel scope and a capacity
    limiter that cost ~8% of a PostgreSQL read's throughput under load (measured with
    `bench.http_path`, concurrency 16)."""
    if _alone(request):
        return read()
    if request.app.state.store_bridged:
        return await bridged(read)
    return await asyncio.to_thread(read)


async def _small_body(request: Request) -> bool:
    """Whether the request's body is at most `loop_write_max_bytes` (read already, for a
    route that takes one; a chunked body has no Content-Length to trust)."""
    return len(await request.body()) <= request.app.state.settings.loop_write_max_bytes


async def short_write(request: Request, write: Callable[[], R]) -> R:
    """Run a small write (`_small_body`) on the event loop when no other request is in
    flight: on SQLite as it is (a POST /messages then costs about a quarter less than
    with a hand-off), on PostgreSQL under the loop's bridge (`store_bridged`), its waits
    on the server awaited. A larger write always runs in a thread: its CPU (parsing, token
    counts, hashing, sealing) grows with its size, and on the loop a 4 MiB message held
    every other request for seconds.
    It first yields to the loop once, so that the requests it has already received begin
    and are counted: without that, sixteen writes that arrived together each found itself
    alone, ran one after another on the loop, each waiting for its own fsync, and shared
    no group commit (throughput fell below concurrency 1; p99 rose fourfold). Alone on
    the loop, a SQLite write never waits for another writer (`without_waiting`): one that
    finds another at work (another process's transaction: several workers, a command run
    beside the server; a background write of this one) stores nothing there and goes to
    a thread, which waits its turn (on the loop, a long transaction of another process
    held every request of this one).
    Otherwise a thread of FastAPI's pool (anyio's 40, as for a plain `def` route) writes:
    many writers waiting together is what lets a group commit batch them, and what keeps
    a write's blocking parts (a quota's count, a lost race's back-off) off the loop."""
    await asyncio.sleep(0)
    if await _small_body(request):
        if _alone(request):
            try:  # (never waiting there for another writer: a thread waits for it below)
                with without_waiting():
                    return write()
            except TurnNotFree:
                pass
        state = request.app.state
        if state.store_bridged and state.metrics.in_flight <= 1:
            return await bridged(write)
    return await run_in_threadpool(write)


SessionKeyPath = Annotated[
    str,
    Path(
        description="The session key, percent-encoded as one path segment: every byte "
        "outside A-Z a-z 0-9 - . _ ~ as %XX of its UTF-8 encoding, `/` included "
        "(Python: urllib.parse.quote(key, safe='')). A key that is exactly `.` or `..` "
        "is sent as %2E or %2E%2E.",
        examples=["user-42%2Fchat%201"],
        # Documents the decoded key; the route sees it encoded, so this only informs.
        json_schema_extra={"pattern": TEXT_PATTERN, "minLength": 1, "maxLength": 512},
    ),
]


def decode_session_key(key: str) -> str:
    """The session key of a route's path, decoded."""
    try:
        return unquote_to_bytes(key).decode("utf-8")
    except UnicodeDecodeError:
        raise InvalidSessionKey("the session key is not percent-encoded UTF-8") from None


ALWAYS_LOGGED_ROLES = frozenset({"auditor", "admin"})


def mark_access(request: Request, who: Principal, action: str, key: str | None) -> None:
    """Mark the request's read (`action`) of session `key` (None: across sessions) for the
    access log, when it is to be logged: any read by an auditor or admin key, any export,
    and an agent's reads only with LEDGER_LOG_AGENT_READS. `access_log.AccessLoggedRoute`
    appends the entry once the answer is made."""
    if (who.role in ALWAYS_LOGGED_ROLES or action == "export"
            or request.app.state.settings.log_agent_reads):  # fmt: skip
        request.state.access = (who, action, key)


class SessionCall(NamedTuple):
    """A call on one session: its decoded key, the caller, the ledger (a route unpacks it:
    `key, who, ledger = call`)."""

    key: str
    who: Principal
    ledger: Ledger


def on_session(
    permission: str, logged_as: str | None = None
) -> Callable[[Request, str], Awaitable[SessionCall]]:
    """The dependency of a route on one session, as ONE node (FastAPI solves every node of
    every request anew, about 5-10 µs each): the caller must hold `permission`; a read named
    `logged_as` is marked for the access log."""
    check = require(permission)

    async def solve(request: Request, key: SessionKeyPath) -> SessionCall:
        who = await check(request)
        decoded = decode_session_key(key)
        if logged_as is not None:
            mark_access(request, who, logged_as, decoded)
        return SessionCall(decoded, who, request.app.state.ledger)

    return solve


@dataclass(frozen=True)
class WriteRequestOptions:
    """Preconditions and audit data of one write, from its headers and query."""

    expected_version: int | None
    must_exist: bool
    idempotency_key: str | None
    reason: str | None

    def ledger_kwargs(self, principal: Principal) -> dict[str, Any]:
        return {"reason": self.reason, **self.conditions(principal)}

    def conditions(self, principal: Principal) -> dict[str, Any]:
        """The write's keywords but its reason (a write whose body holds its own)."""
        return {
            "tenant": principal.tenant,
            "actor": principal.actor,
            "expected_version": self.expected_version,
            "idempotency_key": self.idempotency_key,
        }

    def check_exists(self, ledger: Ledger, key: str, tenant: str) -> None:
        """`If-Match: *`: PreconditionFailed unless the session exists (the ledger checks a
        version given itself, in the write)."""
        if self.must_exist:
            try:
                ledger.head(key, tenant=tenant, latest=True)
            except SessionNotFound:
                raise PreconditionFailed(
                    f"If-Match: * but session {key!r} does not exist"
                ) from None


class WriteHeaders(RouteInputs):
    """The conditional-write headers of a write (one whose body gives its reason)."""

    HEADERS = frozenset({"if_match", "if_none_match", "idempotency_key"})
    if_match: str | None = Field(
        None,
        description='Write only if the session is at this version: its ETag, e.g. "3"; '
        "`*`: only if the session exists. Stale: 412, nothing written.",
        pattern=r'^\s*("\d{1,18}"|\d{1,18}|\*)\s*$',
    )
    if_none_match: str | None = Field(
        None,
        description="`*`: write only if the session does not exist yet (else 412).",
        pattern=r"^\s*\*\s*$",
    )
    idempotency_key: str | None = Field(
        None,
        description="1 to 256 visible ASCII characters, e.g. a UUID. A retried write "
        "with the same key and body is applied once and answered with the first result "
        "(Idempotent-Replayed: true).",
        max_length=256,
        pattern=r"^[\x21-\x7e]+$",
    )

    def audit_reason(self) -> str | None:
        return None  # (the body's)

    def write_options(self) -> WriteRequestOptions:
        """The write's options; malformed or contradictory preconditions are refused."""
        expected: int | None = None
        must_exist = False
        if self.if_match is not None:
            if self.if_match.strip() == "*":
                must_exist = True
            else:
                found = ETAG.match(self.if_match)
                if found is None:
                    raise InvalidInput('If-Match must be a session ETag such as "3", or *; '
                                       f"got {self.if_match!r}")  # fmt: skip
                expected = int(found.group(1) or found.group(2))
        if self.if_none_match is not None:
            if self.if_none_match.strip() != "*":
                raise InvalidInput("If-None-Match supports only * (create the session)")
            if must_exist or expected not in (None, 0):
                raise PreconditionFailed("If-Match and If-None-Match: * cannot both hold")
            expected = 0
        return WriteRequestOptions(expected, must_exist, self.idempotency_key, self.audit_reason())

    @classmethod
    async def options(cls, request: Request) -> WriteRequestOptions:
        """The dependency of a write route: its inputs, parsed, as `WriteRequestOptions`."""
        return (await cls.parse(request)).write_options()


class WriteInputs(WriteHeaders):
    """The conditional-write headers and the audit reason of a write."""

    reason: str | None = Field(
        None, description="Why the change was made; kept in the audit trail.", max_length=4096
    )

    def audit_reason(self) -> str | None:
        return self.reason


@dataclass(frozen=True)
class ReadOptions:
    """What a read must see, from its query and headers: a version at least this new
    (`min_version`, and the ETags of `If-None-Match`), and the versions the caller holds
    already (answered 304 Not Modified)."""

    min_version: int | None
    held: frozenset[int]


class ReadInputs(RouteInputs):
    """The read-your-writes query and header of a read (a route's own model adds its
    inputs to these)."""

    HEADERS = frozenset({"if_none_match"})
    min_version: int | None = Field(
        None,
        ge=0,
        le=BIG,
        description="Read this version of the session or a later one: the ETag of a "
        "write you made. With read replicas, a replica that has not replayed it yet is "
        "waited for, or the primary answers.",
    )
    if_none_match: str | None = Field(
        None,
        description='The session ETags you hold, e.g. "3": 304 Not Modified when the '
        "session is still at one of them; never an older version than the newest.",
        max_length=1024,
    )

    def read_options(self) -> ReadOptions:
        """What the read must see; a malformed If-None-Match is refused."""
        held: set[int] = set()
        for tag in [] if self.if_none_match is None else self.if_none_match.split(","):
            found = ETAG.match(tag.strip().removeprefix("W/"))
            if found is None:
                raise InvalidInput(
                    f'If-None-Match must list session ETags such as "3"; got {self.if_none_match!r}'
                )
            held.add(int(found.group(1) or found.group(2)))
        least = max(held | {self.min_version or 0}) if held else self.min_version
        return ReadOptions(least, frozenset(held))

    @classmethod
    async def options(cls, request: Request) -> ReadOptions:
        """The dependency of a read route: its inputs, parsed, as `ReadOptions`."""
        return (await cls.parse(request)).read_options()


class PastInputs(RouteInputs):
    """The version or moment a read of the session is of (default: now)."""

    as_of_version: AsOfVersion = None
    as_of: AsOfTime = None


class WindowInputs(PastInputs):
    """The inputs of a context window: its size, and the version or moment it is of (the
    replay takes these; the context read adds `ReadInputs`)."""

    token_limit: int | None = Field(
        None, ge=1, le=BIG, description="Default: the server's LEDGER_TOKEN_LIMIT."
    )
    # (below 0 too, as LlamaIndex takes it: room for more of the history)
    initial_token_count: int = Field(0, ge=-BIG, le=BIG)


LedgerDep = Annotated[Ledger, Depends(get_ledger)]
KeyStoreDep = Annotated[KeyStore, Depends(key_store)]
ReaderDep = Annotated[Principal, Depends(require(READ))]
AdminDep = Annotated[Principal, Depends(require(MANAGE_KEYS))]
ExporterDep = Annotated[Principal, Depends(require(EXPORT))]
ReadCall = Annotated[SessionCall, Depends(on_session(READ))]
WriteCall = Annotated[SessionCall, Depends(on_session(WRITE))]
AdminCall = Annotated[SessionCall, Depends(on_session(MANAGE_KEYS))]
WriteOptionsDep = Annotated[WriteRequestOptions, Depends(WriteInputs.options)]
# A write whose body gives its reason: the headers alone.
WriteHeadersDep = Annotated[WriteRequestOptions, Depends(WriteHeaders.options)]
ReadOptionsDep = Annotated[ReadOptions, Depends(ReadInputs.options)]
