"""The server's timers, side by side. Two run in `serve`'s own process, one per server
and not per worker, so their rounds do not repeat one another (and the checkpoint files
form one chain): the retention rounds (LEDGER_RETENTION_INTERVAL_MINUTES) and the
checkpoint rounds (LEDGER_CHECKPOINT_INTERVAL_MINUTES); `serve_timers` starts and stops
them around the server. The third, the sweep of streams left open, runs in every API
process's lifespan (`sweeping`). A round that fails is reported, and the next one runs
as planned: the server goes on."""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import AsyncIterator, Callable, Iterator
from contextlib import asynccontextmanager, closing, contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path

from session_ledger.domain.compliance import parse_retention
from session_ledger.domain.errors import CheckpointError, InvalidInput, LedgerError
from session_ledger.domain.ledger import Ledger

from .settings import Settings
from .terminal import echo, secho

log = logging.getLogger("session_ledger.api")


@contextmanager
def serve_timers(settings: Settings) -> Iterator[None]:
    """The checkpoint and retention timers the settings ask for, running until the block
    ends; a setting that cannot work raises here, before the server starts."""
    stops: list[threading.Event] = []
    try:
        for start in (start_checkpoint_timer, start_retention_timer):
            stop = start(settings)
            if stop is not None:
                stops.append(stop)
        yield
    finally:
        for stop in stops:
            stop.set()


def start_retention_timer(
    settings: Settings, clock: Callable[[], datetime] = lambda: datetime.now(UTC)
) -> threading.Event | None:
    """When LEDGER_RETENTION_INTERVAL_MINUTES is set, a thread that applies the retention
    rules at that interval (at the time `clock` gives); set the event returned to stop it.
    Several servers may each run one: an erasure is a write like any other, and a session
    another server erased first is skipped."""
    if not settings.retention_interval_minutes:
        return None
    rules = parse_retention(settings.retention)  # a bad rule stops serve at start-up
    if not rules:
        raise InvalidInput("LEDGER_RETENTION_INTERVAL_MINUTES needs LEDGER_RETENTION rules")

    def apply() -> None:
        with _opened_ledger(settings) as ledger:
            for action in ledger.retention(rules, clock(), dry_run=False):
                if action.action == "erased":
                    echo(f"retention erased {action.tenant}/{action.key}", err=True)

    return _every(settings.retention_interval_minutes, "retention", "retention", apply)


def start_checkpoint_timer(settings: Settings) -> threading.Event | None:
    """When LEDGER_CHECKPOINT_INTERVAL_MINUTES is set, a thread that signs every tenant's
    checkpoint at that interval; set the event returned to stop it."""
    if not settings.checkpoint_interval_minutes:
        return None
    if settings.signing_key_file is None:
        raise CheckpointError("LEDGER_CHECKPOINT_INTERVAL_MINUTES needs LEDGER_SIGNING_KEY_FILE")

    def sign() -> None:
        with _opened_ledger(settings) as ledger:
            make_checkpoints(settings, ledger)

    return _every(settings.checkpoint_interval_minutes, "checkpoints", "checkpoint", sign)


def make_checkpoints(settings: Settings, ledger: Ledger, tenant: str | None = None) -> list[Path]:
    """One checkpoint per tenant (or of `tenant`): the files written. What the checkpoint
    timer does at each round, and the `checkpoint` command once."""
    from session_ledger.projections.checkpoint import load_private_key, make_checkpoint

    if settings.signing_key_file is None:
        raise CheckpointError("set LEDGER_SIGNING_KEY_FILE to the checkpoint signing key")
    key = load_private_key(settings.signing_key_file)
    evidence = ledger.views.evidence
    tenants = [tenant] if tenant is not None else evidence.tenants()
    return [make_checkpoint(evidence, t, key, settings.checkpoint_dir)[0] for t in tenants]


def _every(minutes: float, name: str, what: str, work: Callable[[], None]) -> threading.Event:
    """`work` every `minutes` (the first round after one interval) on a daemon thread
    named `name`, until the event returned is set."""
    stop = threading.Event()

    def run() -> None:
        while not stop.wait(minutes * 60):
            try:
                work()
            except Exception as exc:  # the server goes on; the next round tries again
                secho(f"{what} failed: {type(exc).__name__}: {exc}", err=True)

    threading.Thread(target=run, name=name, daemon=True).start()
    return stop


@contextmanager
def _opened_ledger(settings: Settings) -> Iterator[Ledger]:
    from .bootstrap import open_ledger  # the root picks the store

    with closing(open_ledger(settings, auto_migrate=False)) as ledger:
        yield ledger


@asynccontextmanager
async def sweeping(ledger: Ledger, timeout_seconds: float) -> AsyncIterator[None]:
    """The sweep of streams left open, while the block runs: every open stream with no
    event for `timeout_seconds` is aborted (cause "timeout"), whoever left it: a client
    that went away, or a process that died mid-stream (the first sweep runs at start-up,
    so a restart recovers them). Every API process sweeps; an abort another process made
    first is skipped."""
    task = asyncio.create_task(_sweep_forever(ledger, timeout_seconds))
    try:
        yield
    finally:
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task


async def _sweep_forever(ledger: Ledger, timeout_seconds: float) -> None:
    # A quarter of the timeout between sweeps: a stream is aborted at most 1.25 times
    # its timeout after its last event.
    pause = max(timeout_seconds / 4, 0.05)
    while True:
        try:
            aborted = await asyncio.to_thread(ledger.abort_idle_streams, timeout_seconds)
            if aborted:
                log.info("aborted %d stream(s) idle for %g s", aborted, timeout_seconds)
        except (LedgerError, OSError) as e:  # the store is away: try again next time
            log.warning("stream sweep failed: %s", e)
        await asyncio.sleep(pause)
