"""What one large write costs everyone else: a `session-ledger serve` (defaults: 4 MiB a
message, cl100k_base) gets one write of `--messages` x 4 MiB of spaces or of one
letter, alone; from 0.15 s after it was sent until it returns, `/healthz` and another
tenant's one-message write are sent one after another, and timed.

`python -m bench.diagnostics.large_write --store sqlite|postgres --text spaces|letter
[--messages 7]` prints a Markdown table and writes
bench/results/large-write-<store>-<text>-<messages>-latest.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

from bench.http_api import Server
from bench.postgres import scratch_database
from bench.results import write_diagnostic

CONTENT_CHARS = 4 * 1024 * 1024 - 128  # within the default 4 MiB message


def other_tenants_key(database_url: str) -> str:
    env = {**os.environ, "LEDGER_DATABASE_URL": database_url}
    command = [sys.executable, "-c", "from session_ledger.api.cli import main; main()"]
    done = subprocess.run([*command, "keys", "create", "--tenant", "other", "--role", "agent"],
                          env=env, capture_output=True, text=True, check=True)  # fmt: skip
    return next(line.split(": ", 1)[1] for line in done.stdout.splitlines()
                if line.startswith("key: "))  # fmt: skip


def timed(client: httpx.Client, send: str, path: str, until: threading.Event) -> list[float]:
    times, body = [], {"messages": [{"role": "user", "content": "a small write"}]}
    while not until.is_set():
        started = time.perf_counter()
        answer = client.post(path, json=body) if send == "POST" else client.get(path)
        times.append(time.perf_counter() - started)
        answer.raise_for_status()
        time.sleep(0.005)
    return times


def run(server: Server, other: str, content: str, messages: int) -> dict[str, object]:
    body = json.dumps({"messages": [{"role": "user", "content": content}] * messages})
    done, results, took = threading.Event(), {}, {}

    def write() -> None:
        headers = {"Authorization": f"Bearer {server.api_key}",
                   "Content-Type": "application/json"}  # fmt: skip
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=600) as client:
            started = time.perf_counter()
            client.post("/v1/sessions/large/messages", content=body).raise_for_status()
            took["write_s"] = time.perf_counter() - started
        done.set()

    def sample(name: str, send: str, path: str, key: str | None) -> None:
        headers = {"Authorization": f"Bearer {key}"} if key else {}
        with httpx.Client(base_url=server.base_url, headers=headers, timeout=600) as client:
            results[name] = timed(client, send, path, done)

    writer = threading.Thread(target=write)
    small = ("another tenant's write", "POST", "/v1/sessions/small/messages", other)
    samplers = [threading.Thread(target=sample, args=("/healthz", "GET", "/healthz", None)),
                threading.Thread(target=sample, args=small)]  # fmt: skip
    writer.start()
    time.sleep(0.15)  # the large write arrives alone
    for thread in samplers:
        thread.start()
    for thread in [writer, *samplers]:
        thread.join()
    figures: dict[str, object] = {"write_s": took["write_s"]}
    for name, times in results.items():
        ordered = sorted(times)
        figures[name] = {"requests": len(ordered), "p50_ms": ordered[len(ordered) // 2] * 1000,
                         "p99_ms": ordered[int(0.99 * (len(ordered) - 1))] * 1000,
                         "max_ms": ordered[-1] * 1000}  # fmt: skip
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", choices=["sqlite", "postgres"], default="sqlite")
    parser.add_argument("--text", choices=["spaces", "letter"], default="spaces")
    parser.add_argument("--messages", type=int, default=1)
    args = parser.parse_args()
    content = (" " if args.text == "spaces" else "x") * CONTENT_CHARS
    with contextlib.ExitStack() as stack:
        folder = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        if args.store == "sqlite":
            url = f"sqlite:///{folder / 'ledger.db'}"
        else:
            url = stack.enter_context(scratch_database("large"))
        server = Server(url, folder)
        stack.callback(server.stop)
        figures = run(server, other_tenants_key(url), content, args.messages)
    print(f"{args.messages} x 4 MiB of {args.text}, {args.store}: the write took "
          f"{figures['write_s']:.2f} s\n")  # fmt: skip
    print("| request, meanwhile | requests | p50 | p99 | max |\n|---|---|---|---|---|")
    for name, cell in figures.items():
        if isinstance(cell, dict):
            print(f"| {name} | {cell['requests']} | {cell['p50_ms']:.1f} ms | "
                  f"{cell['p99_ms']:.1f} ms | {cell['max_ms']:.1f} ms |")  # fmt: skip
    command = " ".join(["python -m bench.diagnostics.large_write", *sys.argv[1:]])
    name = f"large-write-{args.store}-{args.text}-{args.messages}-latest.json"
    write_diagnostic(name, {"command": command, **figures})


if __name__ == "__main__":
    main()
