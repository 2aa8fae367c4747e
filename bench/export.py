"""W7: the compliance export of a 10,000-event session (one message per event) to JSONL,
in-process and over HTTP, on SQLite and PostgreSQL: events/s, MB/s and memory.

Memory is measured two ways: tracemalloc's peak over an export (Python allocations,
a second pass, since tracing slows the code it watches) and the growth of the
process's peak RSS (VmHWM, reset through /proc/<pid>/clear_refs before the export;
for HTTP, of the server process). No peer has an export, so there is no anchor.
"""

from __future__ import annotations

import contextlib
import time
import tracemalloc
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import httpx

from .corpus import TOKEN_LIMIT, Message
from .workloads import Cell

EVENTS = 10_000  # messages, one per event (plus the session's first event)
SESSION = "w7-export"
MB = 1_000_000


def _status_kb(pid: int | str, field: str) -> int | None:
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1])
    return None


def _rss_growth_mb(pid: int | str, run: Callable[[], Any]) -> tuple[Any, float | None]:
    """`run()`'s result and how far the process's peak RSS rose above its RSS before."""
    reset = False
    with contextlib.suppress(OSError):
        Path(f"/proc/{pid}/clear_refs").write_text("5")  # VmHWM := VmRSS (Linux >= 4.0)
        reset = True
    before = _status_kb(pid, "VmRSS")
    result = run()
    peak = _status_kb(pid, "VmHWM" if reset else "VmRSS")
    if before is None or peak is None:
        return result, None
    return result, max(0, peak - before) * 1024 / MB


def _drain(chunks: Iterable[bytes]) -> int:
    return sum(len(c) for c in chunks)


class ExportBench:
    """One backend's W7 session, in a ledger of this process and behind a server."""

    def __init__(self, backend: str, url: str, workdir: Path) -> None:
        self.backend = backend
        self.url = url
        self.workdir = workdir
        self.server: Any = None

    def load(self, messages: list[Message]) -> None:
        """The session: one put per message, as an agent writes it (not timed)."""
        from session_ledger.api.bootstrap import migrate, open_ledger
        from session_ledger.api.settings import Settings

        settings = Settings(database_url=self.url, token_limit=TOKEN_LIMIT)
        migrate(settings)
        self.ledger = open_ledger(settings)
        for message in messages[:EVENTS]:
            self.ledger.put(SESSION, message)

    def start_server(self) -> None:
        from .http_api import Server

        self.server = Server(self.url, self.workdir)

    def library(self) -> Cell:
        from session_ledger.projections.export import export_session

        t0 = time.perf_counter()
        size, rss = _rss_growth_mb("self", lambda: _drain(export_session(self.ledger, SESSION)))
        elapsed = time.perf_counter() - t0
        tracemalloc.start()
        try:
            _drain(export_session(self.ledger, SESSION))
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        return self._cell(size, elapsed, {"tracemalloc_peak_mb": peak / MB, "rss_growth_mb": rss})

    def http(self) -> Cell:
        from session_ledger.api.client_requests import session_path

        server = self.server
        headers = {"Authorization": f"Bearer {server.api_key}"}
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=300) as client:

            def export() -> int:
                with client.stream("GET", session_path(SESSION, "/export")) as answer:
                    answer.raise_for_status()
                    return _drain(answer.iter_raw())

            t0 = time.perf_counter()
            size, rss = _rss_growth_mb(server.process.pid, export)
            elapsed = time.perf_counter() - t0
        return self._cell(size, elapsed, {"rss_growth_mb": rss})

    def _cell(self, size: int, elapsed: float, memory: dict[str, float | None]) -> Cell:
        events = EVENTS + 1
        extra = {"mb_per_s": size / MB / elapsed, "export_mb": size / MB, "events": events,
                 "seconds": elapsed}  # fmt: skip
        extra.update({k: v for k, v in memory.items() if v is not None})
        return Cell("events/s", value=events / elapsed, extra=extra)

    def measure(self) -> dict[str, Cell]:
        cells = {"W7 export library": self.library()}
        if self.server is not None:
            cells["W7 export HTTP"] = self.http()
        return cells

    def close(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.ledger.close()


def export_table(cells: dict[str, dict[str, list[Cell]]]) -> str:
    """W7: one row per store and way in (medians over repetitions)."""
    import statistics

    from .report import _fmt

    def median(reps: list[Cell], key: str) -> str:
        values = [c.extra[key] for c in reps if key in c.extra]
        return _fmt(statistics.median(values)) if values else "—"

    rows = []
    for store, by_workload in cells.items():
        for workload, reps in by_workload.items():
            done = [c for c in reps if c.value is not None]
            if not workload.startswith("W7 ") or not done:
                continue
            rate = statistics.median(c.value for c in done if c.value is not None)
            rows.append(
                f"| {store} | {workload.split()[-1]} | {_fmt(rate)} | {median(done, 'mb_per_s')} "
                f"| {median(done, 'export_mb')} | {median(done, 'tracemalloc_peak_mb')} "
                f"| {median(done, 'rss_growth_mb')} |"
            )
    if not rows:
        return ""
    head = [
        "",
        "",
        f"W7 compliance export to JSONL of a {EVENTS:,}-message session (one message per "
        "event; the file carries each event's stored record, base64, and its chain hash). "
        "No peer anchor: none of LlamaIndex's stores (nor OpenAI Agents' session) has an "
        "export. Memory: tracemalloc peak of the exporting process (library), and the rise "
        "of peak RSS during the export (for HTTP, of the server process):",
        "",
        "| store | via | events/s | MB/s | export MB | tracemalloc peak MB | RSS growth MB |",
        "|---|---|---|---|---|---|---|",
    ]
    return "\n".join(head + rows)
