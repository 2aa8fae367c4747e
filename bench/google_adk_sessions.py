"""`LedgerSessionService` against Google ADK's own `DatabaseSessionService`, on SQLite and
on PostgreSQL.

Both are driven as ADK's `Runner` drives a session service: the session object a call
returns is the one passed to the next `append_event`. On SQLite each service has a file
of its own in one folder (`--workdir`, default var/bench: a real disk, where fsync
costs; ADK's through `sqlite+aiosqlite`); on PostgreSQL each has a scratch database
(ADK's through `postgresql+asyncpg`, its default driver). The ledger is opened as a host
opens it (`open_ledger`, default settings: cl100k_base token counts on every write).
Events are the bench corpus's messages (~400 characters, user and model in turn) as ADK
events with text content.

| workload | what |
|---|---|
| append | `append_event` of `--events` events, one a call, to one session |
| get-50 | `get_session(num_recent_events=50)` of that session (`--events` events) |
| append+get-50 | their sum: the figure issue 54 sets (>= 2x ADK's) |
| since-10 | `get_session(after_timestamp=t)`, t the tenth newest event's time (10 events) |
| turn | a Runner's turn: `get_session(num_recent_events=50)`, then two `append_event` |

The two services take turns, `--rounds` times (wall-clock time here swings by a third
with the machine's load); a figure is the median of the rounds.

    python -m bench.google_adk_sessions [--events 1000] [--rounds 3] [--no-postgres]

prints a Markdown table per store and writes bench/results/google-adk-latest.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

from google.adk.events.event import Event
from google.adk.sessions.base_session_service import BaseSessionService, GetSessionConfig
from google.genai import types

from bench.corpus import conversation
from bench.results import write_diagnostic

SERVICES = ("LedgerSessionService", "DatabaseSessionService")
APP, USER = "bench", "user"


@contextlib.asynccontextmanager
async def open_service(name: str, store: str, folder: Path) -> AsyncIterator[BaseSessionService]:
    """A session service of `name` on a new SQLite file in `folder` or a new PostgreSQL
    database, closed (and the database dropped) after the block."""
    with contextlib.ExitStack() as stack:
        if store == "postgres":
            from bench.postgres import scratch_database

            url = stack.enter_context(scratch_database(f"adk_{name[:6].lower()}"))
        else:
            url = f"sqlite:///{folder / f'{name}.db'}"
        if name == "DatabaseSessionService":
            from google.adk.sessions.database_session_service import DatabaseSessionService

            driver = "postgresql+asyncpg" if store == "postgres" else "sqlite+aiosqlite"
            service = DatabaseSessionService(driver + url[url.index(":") :])
            try:
                yield service
            finally:
                await service.close()
            return
        from session_ledger.api.bootstrap import migrate, open_ledger
        from session_ledger.api.google_adk import LedgerSessionService
        from session_ledger.api.settings import Settings

        settings = Settings(database_url=url)
        migrate(settings)
        ledger = open_ledger(settings)
        try:
            yield LedgerSessionService(ledger=ledger)
        finally:
            ledger.close()


def events_of(n: int) -> list[Event]:
    messages = conversation(n)
    return [
        Event(
            invocation_id=f"inv-{i // 2}", author="user" if m["role"] == "user" else "agent",
            content=types.Content(role="user" if m["role"] == "user" else "model",
                                  parts=[types.Part(text=m["content"])]),
        )
        for i, m in enumerate(messages)
    ]  # fmt: skip


async def timed(calls: int, call: Callable[[int], Awaitable[Any]]) -> float:
    """Seconds per call of `calls` calls."""
    started = time.perf_counter()
    for i in range(calls):
        await call(i)
    return (time.perf_counter() - started) / calls


async def measure(name: str, store: str, folder: Path, events: list[Event]) -> dict[str, float]:
    """Seconds per call of each workload, for one service, on fresh stores."""
    figures: dict[str, float] = {}
    recent = GetSessionConfig(num_recent_events=50)
    fresh = [e.model_copy(deep=True) for e in events]
    async with open_service(name, store, folder) as service:
        session = await service.create_session(app_name=APP, user_id=USER, session_id="s")
        figures["append"] = await timed(
            len(fresh), lambda i: service.append_event(session, fresh[i])
        )

        async def get(_: int) -> None:
            got = await service.get_session(
                app_name=APP, user_id=USER, session_id="s", config=recent
            )
            assert got is not None and len(got.events) == 50

        figures["get-50"] = await timed(max(len(events) // 10, 20), get)
        since = GetSessionConfig(after_timestamp=session.events[-10].timestamp)

        async def get_since(_: int) -> None:
            got = await service.get_session(
                app_name=APP, user_id=USER, session_id="s", config=since
            )
            assert got is not None and len(got.events) >= 10  # (more if times are equal)

        figures["since-10"] = await timed(max(len(events) // 10, 20), get_since)
    figures["append+get-50"] = figures["append"] + figures["get-50"]
    fresh = [e.model_copy(deep=True) for e in events]
    async with open_service(name, store, folder) as service:
        await service.create_session(app_name=APP, user_id=USER, session_id="t")

        async def turn(i: int) -> None:
            got = await service.get_session(
                app_name=APP, user_id=USER, session_id="t", config=recent
            )
            assert got is not None
            await service.append_event(got, fresh[2 * i])
            await service.append_event(got, fresh[2 * i + 1])

        figures["turn"] = await timed(len(fresh) // 2, turn)
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=1000, help="events a session holds")
    parser.add_argument("--rounds", type=int, default=3, help="turns of the two services")
    parser.add_argument("--workdir", type=Path, default=Path("var/bench"))
    parser.add_argument("--no-postgres", action="store_true", help="SQLite only")
    args = parser.parse_args()
    events = events_of(args.events)
    args.workdir.mkdir(parents=True, exist_ok=True)
    stores = ["sqlite"] if args.no_postgres else ["sqlite", "postgres"]
    fields: dict[str, Any] = {
        "command": " ".join(["python -m bench.google_adk_sessions", *sys.argv[1:]]),
        "events": args.events,
    }
    for store in stores:
        rounds: dict[str, list[dict[str, float]]] = {s: [] for s in SERVICES}
        for r in range(args.rounds):
            for name in SERVICES if r % 2 == 0 else SERVICES[::-1]:  # alternate who goes first
                folder = Path(tempfile.mkdtemp(prefix="adk-", dir=args.workdir))
                try:
                    rounds[name].append(asyncio.run(measure(name, store, folder, events)))
                finally:
                    shutil.rmtree(folder, ignore_errors=True)
        median = {s: {w: statistics.median(r[w] for r in rounds[s]) for w in rounds[s][0]}
                  for s in SERVICES}  # fmt: skip
        ledger, adk = median["LedgerSessionService"], median["DatabaseSessionService"]
        print(f"\nLedgerSessionService vs DatabaseSessionService on {store}, {args.events} "
              f"events, median of {args.rounds} rounds:\n")  # fmt: skip
        print("| workload | ledger ms/call | ADK database ms/call | ADK / ledger |")
        print("|---|---|---|---|")
        for w in ledger:
            print(
                f"| {w} | {ledger[w] * 1e3:.3f} | {adk[w] * 1e3:.3f} | {adk[w] / ledger[w]:.2f}x |"
            )
        fields[store] = {
            "seconds_per_call": median,
            "rounds": rounds,
            "ratio_adk_over_ledger": {w: adk[w] / ledger[w] for w in ledger},
        }
    print(f"\nwritten: {write_diagnostic('google-adk-latest.json', fields)}")


if __name__ == "__main__":
    main()
