"""Clients writing to shared sessions over HTTP, each answer's version kept, and the check
of every acknowledged version against the audit trail.

Every client writes to the same few sessions through the given servers in turn (so each
process's cached state of a session is often behind the other's, and writers of one
process race each other), with appends, sets, resets, deletes and archives. Every write
carries a unique operation id as its `reason`, which the audit trail keeps with the
event; half the clients also send it as `Idempotency-Key` and send the write again with
it after a dropped connection or a 5xx, the others never send a write twice. Afterwards
the event at each acknowledged version must be that very write: its reason the
operation's id (and, keyed, its idempotency key too).
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from session_ledger.api.client import session_path
from tests.reliability.workload import audit_trail

KEYED_DEADLINE_SECONDS = 60.0  # a keyed write is sent again until then (a restart between)
RETRY_PAUSE_SECONDS = 0.05
MESSAGE = {"role": "user", "content": "acknowledged"}
# (operation, weight): appends most, as agents do; every kind of write answers a version.
OPERATIONS = [("append", 6), ("set", 1), ("reset", 1), ("delete", 1), ("archive", 1)]


@dataclass(frozen=True)
class Acknowledged:
    """A 200: which operation, on which session, and the version it was answered."""

    op_id: str
    session: str
    version: int
    keyed: bool
    replayed: bool


@dataclass
class Report:
    """What the audit trail says of the acknowledgements."""

    acknowledged: int = 0
    replayed: int = 0
    keyed: int = 0
    mismatched: list[str] = field(default_factory=list)  # acknowledged with another's version
    lost: int = 0
    duplicated: int = 0
    answers: Counter[str] = field(default_factory=Counter)

    def line(self, name: str) -> str:
        return (
            f"{name}: acknowledgements checked {self.acknowledged} (keyed {self.keyed}, "
            f"replayed {self.replayed}), mismatched {len(self.mismatched)}, lost {self.lost}, "
            f"duplicated {self.duplicated}; answers {dict(sorted(self.answers.items()))}"
        )


class VersionedWriters:
    """`clients` threads writing to `sessions` shared sessions through `servers`."""

    def __init__(
        self, servers: list[str], api_key: str, *, clients: int = 8, sessions: int = 2,
        seed: int = 51,
    ) -> None:  # fmt: skip
        self.servers = servers
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.clients = clients
        self.seed = seed
        run = uuid.uuid4().hex[:8]
        self.sessions = [f"versions-{run}-{s}" for s in range(sessions)]
        self.run_id = run
        self.acks: list[Acknowledged] = []
        self.sent: list[str] = []  # every operation's id, acknowledged or not
        self.answers: Counter[str] = Counter()
        self._lock = threading.Lock()

    @property
    def acknowledged(self) -> int:
        return len(self.acks)

    def run(self, until: Callable[[], bool]) -> None:
        """Write until `until()`."""
        workers = [
            threading.Thread(target=self._client, args=(n, until)) for n in range(self.clients)
        ]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()

    def _client(self, n: int, until: Callable[[], bool]) -> None:
        rng = random.Random(self.seed * 1000 + n)
        keyed = n % 2 == 0
        names = [name for name, weight in OPERATIONS for _ in range(weight)]
        clients = [
            httpx.Client(base_url=url, headers=self.headers, timeout=120) for url in self.servers
        ]
        try:
            count = 0
            while not until():
                op_id = f"{self.run_id}-{n}-{count}"
                self._send(
                    op_id, rng.choice(self.sessions), rng.choice(names), keyed, clients, n + count
                )
                count += 1
        finally:
            for client in clients:
                client.close()

    def _send(
        self, op_id: str, session: str, name: str, keyed: bool, clients: list[httpx.Client],
        turn: int,
    ) -> None:  # fmt: skip
        path = session_path(session, "/messages")
        method, url, body = {
            "append": ("POST", path, {"messages": [MESSAGE]}),
            "set": ("PUT", path, {"messages": [MESSAGE, MESSAGE]}),
            "reset": ("DELETE", path, None),
            "delete": ("DELETE", session_path(session, "/messages/last"), None),
            "archive": ("POST", session_path(session, "/archive"), {"count": 1}),
        }[name]
        headers = {"Idempotency-Key": op_id} if keyed else {}
        with self._lock:
            self.sent.append(op_id)
        deadline = time.monotonic() + KEYED_DEADLINE_SECONDS
        while True:
            client = clients[turn % len(clients)]  # the next try goes to the next server
            turn += 1
            try:
                answer = client.request(method, url, json=body, headers=headers,
                                        params={"reason": op_id})  # fmt: skip
            except httpx.TransportError as exc:
                self._count(f"transport {type(exc).__name__}")
                time.sleep(RETRY_PAUSE_SECONDS)  # the server may be restarting
            else:
                code = answer.json().get("error", {}).get("code", "") if answer.is_error else ""
                self._count(f"{answer.status_code} {code}".strip())
                if answer.is_success:
                    written = answer.json()
                    ack = Acknowledged(
                        op_id, session, written["version"], keyed, written["replayed"]
                    )
                    with self._lock:
                        self.acks.append(ack)
                    return
                if answer.status_code < 500:
                    return  # refused, so not written (a delete from an empty session, say)
                time.sleep(RETRY_PAUSE_SECONDS)
            if not keyed or time.monotonic() > deadline:
                return

    def _count(self, answer: str) -> None:
        with self._lock:
            self.answers[answer] += 1

    def check(self, server: str) -> Report:
        """Read every session's audit trail: the event at each acknowledged version must
        be that acknowledged write; and each operation is stored at most once."""
        events: dict[tuple[str, int], dict[str, object]] = {}
        stored: Counter[str] = Counter()
        with httpx.Client(base_url=server, headers=self.headers, timeout=120) as client:
            for session in self.sessions:
                for event in audit_trail(client, session):
                    events[session, event["version"]] = event
                    if event["event_type"] != "SessionStarted":  # shares the first reason
                        stored[str(event["reason"])] += 1
        report = Report(answers=self.answers)
        for ack in self.acks:
            report.acknowledged += 1
            report.keyed += ack.keyed
            report.replayed += ack.replayed
            event = events.get((ack.session, ack.version))
            own = event is not None and event["reason"] == ack.op_id
            if own and ack.keyed:
                own = event is not None and event["idempotency_key"] == ack.op_id
            if not own:
                report.mismatched.append(
                    f"{ack} answered a version holding "
                    f"{None if event is None else (event['reason'], event['idempotency_key'])}; "
                    f"its own write is stored {stored[ack.op_id]} time(s)"
                )
            if stored[ack.op_id] == 0:
                report.lost += 1
        report.duplicated = sum(max(0, stored[op_id] - 1) for op_id in set(self.sent))
        return report
