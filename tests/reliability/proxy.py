"""A TCP proxy between the service and PostgreSQL that injects faults (asyncio, own thread).

It reads the PostgreSQL wire protocol (v3: it declines TLS and GSS encryption itself)
far enough to know when a client commits: a `COMMIT` statement (simple or extended
protocol), or the Sync that ends a writing statement run outside a transaction (the
ledger's one-statement append). Around each commit it can cut the connection:
  before: the commit message is never sent on; the server rolls back;
  during: the commit message is sent on, then both sides are cut at once;
  after:  the server's answer (through ReadyForQuery) is held back, then both sides cut:
          the write is stored and its acknowledgement lost.
It can also delay every message, blackhole traffic (hold it, answer nothing) or take
the server down (refuse new connections, cut the open ones).
"""

from __future__ import annotations

import asyncio
import random
import struct
import threading
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field

COMMIT_FAULTS = ("before", "during", "after")
WRITES = (b"INSERT ", b"UPDATE ", b"DELETE ")
ENCRYPTION_REQUESTS = (80877103, 80877104)  # SSLRequest, GSSENCRequest


@dataclass(eq=False)
class _Link:
    """One client connection and what the proxy knows of its protocol state."""

    client: asyncio.StreamWriter
    server: asyncio.StreamWriter
    statements: dict[bytes, bytes] = field(default_factory=dict)  # prepared name -> SQL
    portal_sql: bytes = b""
    in_transaction: bool = False
    autocommit_write: bool = False  # a writing statement ran outside a transaction
    wrote: bool = False  # the open transaction wrote (a read-only one's COMMIT is no write)
    armed: str | None = None  # "after": drop the server's answer through ReadyForQuery

    def committing(self) -> bool:
        """At a COMMIT: whether it commits a write (and the next transaction starts clean)."""
        wrote, self.wrote = self.wrote, False
        return wrote

    def cut(self) -> None:
        for writer in (self.client, self.server):
            writer.transport.abort()


class FaultProxy:
    """Listens on 127.0.0.1:<port> and forwards to `upstream`; faults set by the methods."""

    def __init__(self, upstream_host: str, upstream_port: int, seed: int = 1) -> None:
        self.upstream = (upstream_host, upstream_port)
        self.random = random.Random(seed)
        self.commit_fault_rate = 0.0
        self.commit_faults: Sequence[str] = COMMIT_FAULTS
        self.delay = 0.0
        self.blackholed = False
        self.faults: Counter[str] = Counter()
        self.commits = 0
        self._links: set[_Link] = set()
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait()
        self.port = self._port
        self.call(self._listen)

    # --- control, from any thread -------------------------------------------------------

    def call(self, function: object) -> None:
        """Run a coroutine function on the proxy's loop and wait for it."""
        asyncio.run_coroutine_threadsafe(function(), self._loop).result(timeout=30)  # type: ignore[operator]

    def go_down(self) -> None:
        """The server is gone: new connections are refused, open ones cut."""
        self.call(self._stop_listening)
        self.faults["down"] += 1

    def come_back(self) -> None:
        self.call(self._listen)

    def blackhole(self, on: bool) -> None:
        """Hold all traffic (nothing forwarded, nothing answered) while on."""
        self.blackholed = on
        if on:
            self.faults["blackhole"] += 1

    def close(self) -> None:
        self.call(self._stop_listening)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)

    # --- the loop -----------------------------------------------------------------------

    def _run(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_until_complete(self._bind())
        self._ready.set()
        self._loop.run_forever()

    async def _bind(self) -> None:
        # Bound once: the port stays the service's database address across outages.
        server = await asyncio.start_server(self._accept, "127.0.0.1", 0)
        self._port = int(server.sockets[0].getsockname()[1])
        server.close()
        await server.wait_closed()

    async def _listen(self) -> None:
        if self._server is None:
            self._server = await asyncio.start_server(
                self._accept, "127.0.0.1", self._port, reuse_address=True
            )

    async def _stop_listening(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for link in list(self._links):
            link.cut()
        self._links.clear()

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(*self.upstream)
        except OSError:
            writer.transport.abort()
            return
        link = _Link(writer, up_writer)
        self._links.add(link)
        try:
            await asyncio.gather(
                self._from_client(reader, link), self._from_server(up_reader, link)
            )
        except (OSError, asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            link.cut()
            self._links.discard(link)

    async def _hold(self) -> None:
        while self.blackholed:
            await asyncio.sleep(0.05)
        if self.delay:
            await asyncio.sleep(self.delay)

    async def _from_client(self, reader: asyncio.StreamReader, link: _Link) -> None:
        while True:  # the startup message has no type byte
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!i", head)
            body = await reader.readexactly(length - 4)
            if struct.unpack("!i", body[:4])[0] not in ENCRYPTION_REQUESTS:
                link.server.write(head + body)
                break
            link.client.write(b"N")  # no TLS, no GSS: then the protocol stays readable
        while True:
            kind = await reader.readexactly(1)
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!i", head)
            body = await reader.readexactly(length - 4)
            await self._hold()
            if self._is_commit(link, kind, body):
                self.commits += 1
                fault = self._draw()
                if fault == "before":
                    link.cut()
                    return
                link.server.write(kind + head + body)
                if fault == "during":
                    await link.server.drain()
                    link.cut()
                    return
                link.armed = fault
            else:
                link.server.write(kind + head + body)
            await link.server.drain()

    async def _from_server(self, reader: asyncio.StreamReader, link: _Link) -> None:
        while True:
            kind = await reader.readexactly(1)
            head = await reader.readexactly(4)
            (length,) = struct.unpack("!i", head)
            body = await reader.readexactly(length - 4)
            await self._hold()
            if kind == b"Z":  # ReadyForQuery: I idle, T in a transaction, E failed one
                link.in_transaction = body != b"I"
                if link.armed == "after":
                    link.cut()  # the server committed; its answer never arrives
                    return
            if link.armed is None:
                link.client.write(kind + head + body)
                await link.client.drain()

    def _draw(self) -> str | None:
        if self.commit_fault_rate and self.random.random() < self.commit_fault_rate:
            fault = self.random.choice(list(self.commit_faults))
            self.faults[fault] += 1
            return fault
        return None

    @staticmethod
    def _is_commit(link: _Link, kind: bytes, body: bytes) -> bool:
        """Whether this client message is the one that commits a write."""
        if kind == b"Q":
            sql = body.rstrip(b"\x00").strip().upper()
            return sql.startswith(b"COMMIT") and link.committing()
        if kind == b"P":  # Parse: statement name, SQL
            name, sql = body.split(b"\x00", 2)[:2]
            link.statements[name] = sql.strip()
            return False
        if kind == b"B":  # Bind: portal name, statement name
            statement = body.split(b"\x00", 2)[1]
            link.portal_sql = link.statements.get(statement, b"")
            return False
        if kind == b"E":  # Execute: COMMIT commits here; a write outside one at its Sync
            sql = link.portal_sql.upper()
            if sql.startswith(b"COMMIT"):
                return link.committing()
            if any(w in sql for w in WRITES):
                if link.in_transaction:
                    link.wrote = True
                else:
                    link.autocommit_write = True
            return False
        if kind == b"S" and link.autocommit_write:
            link.autocommit_write = False
            return True
        return False
