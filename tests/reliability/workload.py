"""Concurrent writers over HTTP, and the tally of what the store kept.

Each writer thread owns its sessions and sends appends, sets, resets, deletes and
archives, spread over the given servers. Every write carries a unique operation id as
its `reason`, which the audit trail keeps with the event: afterwards each id must appear
once for an acknowledged write (0: lost, 2+: duplicated) and at most once for any other.
Keyed writes send the operation id as Idempotency-Key and retry an answer that leaves the
outcome open (5xx, connection error) with it; unkeyed writes are never retried by us.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

import httpx

from session_ledger.api.client import session_path

KEYED_ATTEMPTS = 8
MESSAGE = {"role": "user", "content": "reliability"}
# (operation, weight): appends most, as agents do.
OPERATIONS = [("append", 6), ("set", 1), ("reset", 1), ("delete", 1), ("archive", 1)]


def audit_trail(client: httpx.Client, session: str) -> Iterator[dict[str, Any]]:
    """A session's audit entries over HTTP, page by page (none for an unknown session).

    A page answered `503 store_unavailable` is asked again after its Retry-After, as a
    client does: a pooled connection the store's restart ended is found at its next use."""
    after = 0
    while True:
        params = {"after": after, "limit": 1000}
        answer = client.get(session_path(session, "/events"), params=params)
        for _ in range(20):
            if answer.status_code != 503:
                break
            time.sleep(float(answer.headers.get("Retry-After", "1")))
            answer = client.get(session_path(session, "/events"), params=params)
        if answer.status_code == 404:
            return
        answer.raise_for_status()
        page = answer.json()["events"]
        yield from page
        if len(page) < 1000:
            return
        after = page[-1]["version"]


@dataclass
class Tally:
    """What a run did and what the store kept."""

    operations: int = 0
    acknowledged: int = 0
    lost: int = 0
    duplicated: int = 0
    server_errors: int = 0
    answers: Counter[str] = field(default_factory=Counter)  # "503 store_unavailable", ...
    slowest_5xx: float = 0.0
    faults: dict[str, int] = field(default_factory=dict)

    def line(self, name: str) -> str:
        faults = sum(self.faults.values())
        kinds = ", ".join(f"{k} {v}" for k, v in sorted(self.faults.items()))
        return (
            f"{name}: operations {self.operations}, acknowledged {self.acknowledged}, "
            f"lost {self.lost}, duplicated {self.duplicated}, 5xx {self.server_errors}, "
            f"faults injected {faults} ({kinds or 'none'}); slowest 5xx "
            f"{self.slowest_5xx:.2f} s; answers {dict(sorted(self.answers.items()))}"
        )


@dataclass
class _Op:
    op_id: str
    session: str
    acknowledged: bool = False


class Workload:
    """Writers on `servers` with `api_key`: `threads` threads, `sessions` each."""

    def __init__(
        self, servers: list[str], api_key: str, *, keyed: bool, threads: int = 4,
        sessions: int = 2, seed: int = 7,
    ) -> None:  # fmt: skip
        self.servers = servers
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.keyed = keyed
        self.threads = threads
        self.sessions = sessions
        self.seed = seed
        self.run_id = uuid.uuid4().hex[:8]
        self.ops: list[_Op] = []
        self.tally = Tally()
        self._lock = threading.Lock()
        self._stop = threading.Event()

    def run(self, per_thread: int | None = None, until: Callable[[], bool] | None = None) -> None:
        """Write until each thread sent `per_thread` operations, or until `until()`."""
        workers = [
            threading.Thread(target=self._writer, args=(n, per_thread, until))
            for n in range(self.threads)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _writer(self, n: int, per_thread: int | None, until: Callable[[], bool] | None) -> None:
        rng = random.Random(self.seed * 1000 + n)
        keys = [f"rel-{self.run_id}-{n}-{s}" for s in range(self.sessions)]
        names = [name for name, weight in OPERATIONS for _ in range(weight)]
        clients = [
            httpx.Client(base_url=url, headers=self.headers, timeout=120) for url in self.servers
        ]
        try:
            count = 0
            while (per_thread is None or count < per_thread) and not (until and until()):
                op = _Op(f"{self.run_id}-{n}-{count}", rng.choice(keys))
                self._send(op, rng.choice(names), clients[count % len(clients)])
                count += 1
        finally:
            for client in clients:
                client.close()

    def _send(self, op: _Op, name: str, client: httpx.Client) -> None:
        path = session_path(op.session, "/messages")
        method, url, body = {
            "append": ("POST", path, {"messages": [MESSAGE]}),
            "set": ("PUT", path, {"messages": [MESSAGE, MESSAGE]}),
            "reset": ("DELETE", path, None),
            "delete": ("DELETE", session_path(op.session, "/messages/last"), None),
            "archive": ("POST", session_path(op.session, "/archive"), {"count": 1}),
        }[name]
        headers = {"Idempotency-Key": op.op_id} if self.keyed else {}
        for _ in range(KEYED_ATTEMPTS if self.keyed else 1):
            started = time.monotonic()
            try:
                answer = client.request(method, url, json=body, headers=headers,
                                        params={"reason": op.op_id})  # fmt: skip
            except httpx.TransportError as exc:
                self._count(f"transport {type(exc).__name__}", 0.0)
                continue
            code = answer.json().get("error", {}).get("code", "") if answer.is_error else ""
            self._count(f"{answer.status_code} {code}".strip(), time.monotonic() - started)
            if answer.is_success:
                op.acknowledged = True
                break
            if answer.status_code < 500:
                break  # refused, so not written (an empty session, say)
            time.sleep(min(float(answer.headers.get("Retry-After", "0.1")), 0.2))
        with self._lock:
            self.ops.append(op)

    def _count(self, answer: str, seconds: float) -> None:
        with self._lock:
            self.tally.answers[answer] += 1
            if answer.startswith("5"):
                self.tally.server_errors += 1
                self.tally.slowest_5xx = max(self.tally.slowest_5xx, seconds)

    def check(self, server: str) -> Tally:
        """Read every session's audit trail and count lost and duplicated operations."""
        seen: Counter[str] = Counter()
        with httpx.Client(base_url=server, headers=self.headers, timeout=120) as client:
            for session in {op.session for op in self.ops}:
                for event in audit_trail(client, session):
                    if event["event_type"] != "SessionStarted":  # shares the first reason
                        seen[event["reason"]] += 1
        tally = self.tally
        tally.operations = len(self.ops)
        tally.acknowledged = sum(op.acknowledged for op in self.ops)
        tally.lost = sum(1 for op in self.ops if op.acknowledged and seen[op.op_id] == 0)
        tally.duplicated = sum(max(0, seen[op.op_id] - 1) for op in self.ops)
        return tally
