"""`make bench-http`: the HTTP path of session-ledger against the floor of the same work.

`wrk` drives, in one run and in turns, `session-ledger serve` and the bare FastAPI app of
`bench/http_floor.py` (a dict key lookup and one indexed tail SELECT; one INSERT and its
COMMIT), on SQLite and PostgreSQL, at concurrency 1 / 16 / 64, with 1 and 2 uvicorn
workers: GET `/context` of a 1,000-message session (the 4,000-token window; the floor
reads as many rows as the ledger's window holds) and POST `/messages` of one message to
one of 4,096 sessions at random. Each cell runs the two servers in turns (3 rounds of 3 s
each by default, who goes first alternating), after a warm-up second of each. Beside
them, the raw single-writer INSERT+COMMIT rate of each store, in this process. The
ledger runs its defaults but for rate limits and quotas (off: one key at these rates would
be refused) and the access log (off, as for the floor); requests use an `agent` key (an
admin's reads are written to the access log).

`python -m bench.http_path [--stores sqlite,postgres] [--concurrency 1,16,64]
[--workers 1,2] [--seconds 3] [--rounds 3] [--replica]` (`--replica`: PostgreSQL on a
primary and streaming standby of the run's own, the ledger's reads on the standby)
prints a Markdown table with the ratios and
writes bench/results/http-latest.json. PostgreSQL: LEDGER_BENCH_POSTGRES_URL (default the test
server), in scratch databases of its own (bench/postgres.py), dropped at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

from bench.postgres import scratch_database
from bench.results import scratch_dir, write_diagnostic

POSTGRES_URL = os.environ.get("LEDGER_BENCH_POSTGRES_URL", "postgresql://postgres@127.0.0.1/test")
CONTEXT_SESSION = "bench-context"
CONTEXT_MESSAGES = 1000
TOKEN_LIMIT = 4000
SESSIONS = 4096
WORDS = "the agent asked the ledger for its window and got it back in time"
STARTUP_SECONDS = 90
OFF = {
    "LEDGER_RATE_LIMIT_KEY_PER_SECOND": "0", "LEDGER_RATE_LIMIT_TENANT_PER_SECOND": "0",
    "LEDGER_QUOTA_KEY_WRITE_BYTES_PER_DAY": "0", "LEDGER_QUOTA_TENANT_WRITE_BYTES_PER_DAY": "0",
    "LEDGER_QUOTA_TENANT_SESSIONS": "0", "LEDGER_ACCESS_LOG": "false",
}  # fmt: skip
POST_SCRIPT = """
wrk.headers["Content-Type"] = "application/json"
local threads = 0
function setup(thread) threads = threads + 1; thread:set("id", threads) end
function init(args) math.randomseed(os.time() * 1000 + id) end
request = function()
  local body = '{"messages":[{"role":"user","content":"%s ' .. math.random(1e9) .. '"}]}'
  return wrk.format("POST", "/v1/sessions/w-" .. math.random(%d) .. "/messages", nil, body)
end
"""


def _message(i: int) -> dict[str, str]:
    words = WORDS.split()
    text = " ".join(words[(i + j) % len(words)] for j in range(70))
    return {"role": "user" if i % 2 == 0 else "assistant", "content": f"{i}: {text}"}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Process:
    """A server in a child process, ready once GET `ready_path` answers."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path, ready: str) -> None:
        self.log = log.open("w")
        self.process = subprocess.Popen(command, env={**os.environ, **env}, stdout=self.log,
                                        stderr=subprocess.STDOUT)  # fmt: skip
        deadline = time.monotonic() + STARTUP_SECONDS
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"{command[:3]} exited; see {log}")
            with contextlib.suppress(httpx.TransportError):
                if httpx.get(ready, timeout=1).status_code < 500:
                    return
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"{command[:3]} did not start within {STARTUP_SECONDS} s")

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.log.close()


def wrk(base: str, request: str, key: str, concurrency: int, seconds: float,
        workdir: Path) -> dict[str, Any]:  # fmt: skip
    """One wrk run: requests and seconds, p50 and p99 in ms, non-2xx answers."""
    command = ["wrk", f"-t{min(concurrency, 2)}", f"-c{concurrency}", f"-d{seconds:g}s",
               "--latency", "--timeout", "30s", "-H", f"Authorization: Bearer {key}"]  # fmt: skip
    if request == "get":
        url = f"{base}/v1/sessions/{CONTEXT_SESSION}/context?token_limit={TOKEN_LIMIT}"
    else:
        script = workdir / "post.lua"
        script.write_text(POST_SCRIPT % ("x" * 150, SESSIONS))
        command += ["-s", str(script)]
        url = base
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    done = re.search(r"(\d+) requests in ([\d.]+)(ms|s|m)\b", out)
    assert done is not None, out
    elapsed = float(done.group(2)) * {"ms": 0.001, "s": 1.0, "m": 60.0}[done.group(3)]
    bad = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    errors = re.search(r"Socket errors:.*", out)
    return {
        "requests": int(done.group(1)), "seconds": elapsed,
        "p50_ms": _latency(out, "50%"), "p99_ms": _latency(out, "99%"),
        "non_2xx": int(bad.group(1)) if bad else 0,
        "socket_errors": errors.group(0) if errors else "",
    }  # fmt: skip


def in_turns(runs: list[tuple[str, dict[str, Any]]], rounds: int, seconds: float,
             workdir: Path) -> dict[str, dict[str, Any]]:  # fmt: skip
    """Each of `runs` (name, wrk arguments) for `rounds` turns of `seconds`, who goes
    first changing every round, so the machine's drift falls on all alike: per name,
    requests over its own seconds, the median p50 and p99 of its turns, all non-2xx."""
    turns: dict[str, list[dict[str, Any]]] = {name: [] for name, _ in runs}
    for r in range(rounds):
        for name, args in runs[r % 2 :] + runs[: r % 2]:
            turns[name].append(wrk(**args, seconds=seconds, workdir=workdir))
    return {
        name: {
            "req_s": sum(t["requests"] for t in ts) / sum(t["seconds"] for t in ts),
            "p50_ms": statistics.median(t["p50_ms"] for t in ts),
            "p99_ms": statistics.median(t["p99_ms"] for t in ts),
            "non_2xx": sum(t["non_2xx"] for t in ts),
            "turns": ts,
        }
        for name, ts in turns.items()
    }


def _latency(out: str, which: str) -> float:
    found = re.search(rf"^\s+{re.escape(which)}\s+([\d.]+)(us|ms|s)\b", out, re.M)
    if found is None:
        return float("nan")
    return float(found.group(1)) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[found.group(2)]


def raw_insert_rate(url: str, seconds: float = 3.0) -> float:
    """Single-writer INSERT+COMMIT a second on the store, in this process."""
    body = json.dumps(_message(1))
    if url.startswith("sqlite:"):
        conn = sqlite3.connect(url.removeprefix("sqlite:///"), isolation_level=None)
        conn.execute("PRAGMA journal_mode=WAL")
        conn.execute("PRAGMA synchronous=FULL")
        conn.execute("CREATE TABLE IF NOT EXISTS raw_rows (id INTEGER PRIMARY KEY, body TEXT)")
        run = lambda: conn.execute("INSERT INTO raw_rows (body) VALUES (?)", (body,))  # noqa: E731
    else:
        import psycopg

        conn = psycopg.connect(url, autocommit=True)  # type: ignore[assignment]
        conn.execute("CREATE TABLE IF NOT EXISTS raw_rows (id BIGSERIAL PRIMARY KEY, body TEXT)")
        run = lambda: conn.execute("INSERT INTO raw_rows (body) VALUES (%s)", (body,))  # noqa: E731
    count, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        run()
        count += 1
    elapsed = time.perf_counter() - start
    conn.close()
    return count / elapsed


@contextlib.contextmanager
def database(store: str, workdir: Path, n: int, server: str = POSTGRES_URL) -> Iterator[str]:
    """A fresh store's URL: a SQLite file in `workdir`, or a database on `server`."""
    if store == "sqlite":
        path = workdir / f"{store}-{n}.db"
        for old in (path, *(path.with_name(path.name + end) for end in ("-wal", "-shm"))):
            old.unlink(missing_ok=True)
        yield f"sqlite:///{path}"
        return
    with scratch_database(f"http_{n}", server) as url:
        yield url


def ledger_server(
    url: str, workers: int, workdir: Path, standby: str | None = None
) -> tuple[Process, str, str, int]:
    """`session-ledger serve` with the context session written: (process, base URL, an
    agent key, the window's message count); its reads served by `standby` when given."""
    admin, port = "sl_" + secrets.token_urlsafe(24), _free_port()
    replica = {} if standby is None else {"LEDGER_READ_DATABASE_URLS": standby}
    env = {**OFF, **replica, "LEDGER_DATABASE_URL": url, "LEDGER_PORT": str(port),
           "LEDGER_HOST": "127.0.0.1",
           "LEDGER_WORKERS": str(workers), "LEDGER_BOOTSTRAP_KEY": admin,
           "LEDGER_TOKEN_LIMIT": str(TOKEN_LIMIT)}  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    command = [sys.executable, "-c", "from session_ledger.api.cli import main; main()", "serve"]
    server = Process(command, env, workdir / "ledger.log", f"{base}/readyz")
    auth = {"Authorization": f"Bearer {admin}"}
    with httpx.Client(base_url=base, headers=auth, timeout=60) as client:
        history = [_message(i) for i in range(CONTEXT_MESSAGES)]
        for i in range(0, CONTEXT_MESSAGES, 100):
            client.post(f"/v1/sessions/{CONTEXT_SESSION}/messages",
                        json={"messages": history[i : i + 100]}).raise_for_status()  # fmt: skip
        made = client.post("/v1/keys", json={"role": "agent", "name": "bench"})
        made.raise_for_status()
        agent = made.json()["key"]
        window = client.get(f"/v1/sessions/{CONTEXT_SESSION}/context",
                            params={"token_limit": TOKEN_LIMIT})  # fmt: skip
        window.raise_for_status()
    return server, base, agent, len(window.json()["messages"])


def floor_server(url: str, workers: int, window: int, workdir: Path) -> tuple[Process, str, str]:
    from bench.http_floor import open_floor

    store = open_floor(url)
    store.migrate()
    store.insert_many(CONTEXT_SESSION, [json.dumps(_message(i)) for i in range(CONTEXT_MESSAGES)])
    store.close()
    key, port = "sl_" + secrets.token_urlsafe(24), _free_port()
    env = {"FLOOR_DATABASE_URL": url, "FLOOR_API_KEY": key, "FLOOR_WINDOW": str(window)}
    command = [sys.executable, "-m", "uvicorn", "bench.http_floor:create_app", "--factory",
               "--host", "127.0.0.1", "--port", str(port), "--workers", str(workers),
               "--no-access-log", "--log-level", "warning"]  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    return Process(command, env, workdir / "floor.log", f"{base}/docs"), base, key


def measure(store: str, workers: int, concurrency: list[int], seconds: float, rounds: int,
            workdir: Path, n: int, pair: Any = None) -> list[dict[str, Any]]:  # fmt: skip
    """Every cell of one store and worker count, the ledger and the floor in turns; on a
    primary and standby `pair` (tests/postgres_pair.py), the ledger reads the standby."""
    rows: list[dict[str, Any]] = []
    server = POSTGRES_URL if pair is None else pair.primary_url
    with database(store, workdir, 2 * n, server) as ledger_url, \
            database(store, workdir, 2 * n + 1, server) as floor_url:  # fmt: skip
        standby = None if pair is None else ledger_url.replace(
            f":{pair.primary_port}/", f":{pair.standby_port}/")  # fmt: skip
        ledger, ledger_base, agent, window = ledger_server(ledger_url, workers, workdir, standby)
        try:
            floor, floor_base, floor_key = floor_server(floor_url, workers, window, workdir)
            try:
                raw = raw_insert_rate(floor_url)
                for base, key in ((ledger_base, agent), (floor_base, floor_key)):
                    for request in ("get", "post"):  # warm-up: first answers, caches
                        wrk(base, request, key, 4, 1, workdir)
                for request in ("get", "post"):
                    for c in concurrency:
                        both = in_turns([
                            ("ledger", {"base": ledger_base, "request": request, "key": agent,
                                        "concurrency": c}),
                            ("floor", {"base": floor_base, "request": request,
                                       "key": floor_key, "concurrency": c}),
                        ], rounds, seconds, workdir)  # fmt: skip
                        ours, bare = both["ledger"], both["floor"]
                        row = {"store": store + ("" if pair is None else "+standby"),
                               "workers": workers, "request": request,
                               "concurrency": c, "window": window, "ledger": ours,
                               "floor": bare, "raw_insert_commit_per_s": raw,
                               "ratio": ours["req_s"] / bare["req_s"] if bare["req_s"] else None,
                               "load": os.getloadavg()[0]}  # fmt: skip
                        rows.append(row)
                        print(_line(row), flush=True)
            finally:
                floor.stop()
        finally:
            ledger.stop()
    return rows


HEADER = ("| store | workers | request | c | session-ledger req/s (p50 / p99 ms) | floor req/s "
          "(p50 / p99 ms) | ratio | ledger ÷ raw INSERT+COMMIT | load |\n"
          "|---|---|---|---|---|---|---|---|---|")  # fmt: skip


def _line(row: dict[str, Any]) -> str:
    ours, bare = row["ledger"], row["floor"]
    request = "GET /context" if row["request"] == "get" else "POST /messages"

    def cell(r: dict[str, Any]) -> str:
        errors = f", {r['non_2xx']} non-2xx" if r["non_2xx"] else ""
        return f"{r['req_s']:,.0f} ({r['p50_ms']:.2f} / {r['p99_ms']:.1f}{errors})"

    vs_raw = ours["req_s"] / row["raw_insert_commit_per_s"] if row["request"] == "post" else None
    return (f"| {row['store']} | {row['workers']} | {request} | {row['concurrency']} | "
            f"{cell(ours)} | {cell(bare)} | {row['ratio']:.2f}x | "
            f"{'' if vs_raw is None else f'{vs_raw:.2f}x'} | {row['load']:.1f} |")  # fmt: skip


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--stores", default="sqlite,postgres")
    parser.add_argument("--concurrency", default="1,16,64")
    parser.add_argument("--workers", default="1,2")
    parser.add_argument("--seconds", type=float, default=3.0, help="one turn's length")
    parser.add_argument("--rounds", type=int, default=3, help="turns of each server a cell")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument(
        "--replica",
        action="store_true",
        help="PostgreSQL on a primary of its own, the ledger reading a standby",
    )
    args = parser.parse_args(argv)
    # A TERM (timeout, the operator) unwinds like Ctrl-C: servers stopped, databases dropped.
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: `make bench-http` installs it (apt-get)")
    concurrency = [int(c) for c in args.concurrency.split(",")]
    workdir = args.workdir or scratch_dir("bench-http-")
    workdir.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    print(HEADER, flush=True)
    n = 0
    pair = None
    if args.replica:  # a primary and a standby of the bench's own (as the tests make them)
        from tests.postgres_pair import PostgresPair, postgres_bin

        pair = PostgresPair(postgres_bin() or Path("/usr/lib/postgresql/15/bin")).start()
    try:
        for store in args.stores.split(","):
            for workers in (int(w) for w in args.workers.split(",")):
                rows += measure(store, workers, concurrency, args.seconds, args.rounds,
                                workdir, n, pair if store == "postgres" else None)  # fmt: skip
                n += 1
    finally:
        if pair is not None:
            pair.close()
    command = "python -m bench.http_path " + " ".join(argv if argv is not None else sys.argv[1:])
    fields = {"command": command, "cpus": os.cpu_count(), "seconds": args.seconds,
              "rounds": args.rounds, "rows": rows}  # fmt: skip
    path = write_diagnostic("http-latest.json", fields)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
