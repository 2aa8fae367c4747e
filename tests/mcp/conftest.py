"""The MCP server under test: `session-ledger mcp` over stdio (the SDK's client starts the
command for each session) or over streamable HTTP (one process per store), beside the
e2e fixtures' `serve` process on the same store (SQLite and PostgreSQL), whose API keys
it takes: tenant A ("default") and tenant B, agents, an auditor and admins."""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest

from session_ledger.domain.ledger import Ledger
from tests.e2e import conftest as e2e
from tests.e2e.conftest import CLI, STARTUP_SECONDS, Deployment, free_port

pytest.importorskip("mcp", reason="the MCP server needs the mcp extra")
import httpx2
from mcp.client.session import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.client.streamable_http import streamable_http_client

deployment = e2e.deployment
session_key = e2e.session_key
server_ledgers = e2e.server_ledgers
TENANT = "default"  # tenant A, the servers' default tenant


@dataclass
class HttpServer:
    """A running `session-ledger mcp --transport http`."""

    process: subprocess.Popen[str]
    url: str  # its MCP endpoint


@pytest.fixture(scope="session")
def mcp_http(deployment: Deployment) -> Iterator[HttpServer]:
    """`session-ledger mcp --transport http` on the deployment's store."""
    port = free_port()
    with tempfile.TemporaryFile("w+", encoding="utf-8") as log:
        process = subprocess.Popen(
            [*CLI, "mcp", "--transport", "http", "--port", str(port)],
            env=deployment.server.env, stdout=log, stderr=subprocess.STDOUT, text=True,
        )  # fmt: skip
        url = f"http://127.0.0.1:{port}/mcp"
        try:
            deadline = time.monotonic() + STARTUP_SECONDS
            while True:
                assert process.poll() is None, f"mcp exited {process.returncode}: {_read(log)}"
                with contextlib.suppress(httpx.TransportError):
                    httpx.post(url, timeout=1)  # 401: it listens
                    break
                assert time.monotonic() < deadline, f"mcp did not listen: {_read(log)}"
                time.sleep(0.1)
            yield HttpServer(process, url)
        finally:
            process.terminate()
            process.wait(timeout=20)


def _read(log: Any) -> str:
    log.seek(0)
    return str(log.read())


@dataclass
class Mcp:
    """Sessions of one transport with the server on one deployment's store."""

    transport: str
    deployment: Deployment
    http: HttpServer | None
    ledger: Ledger  # in process, on the same store: what the answers are checked against

    @contextlib.asynccontextmanager
    async def session(self, who: str | None = None, *, secret: str | None = None,
                      **env: str) -> AsyncIterator[ClientSession]:  # fmt: skip
        """An initialized client session with the key of `who` (or `secret`); `env`: the
        stdio server's extra settings."""
        key = secret if secret is not None else self.deployment.keys[str(who)]
        async with contextlib.AsyncExitStack() as stack:
            if self.http is None:
                errors = stack.enter_context(tempfile.TemporaryFile("w+"))  # noqa: SIM115
                server = StdioServerParameters(
                    command=CLI[0], args=[*CLI[1:], "mcp"],
                    env={**self.deployment.server.env, "LEDGER_API_KEY": key, **env},
                )  # fmt: skip
                streams = await stack.enter_async_context(stdio_client(server, errlog=errors))
            else:
                assert not env, "the HTTP server's settings are its process's"
                client = httpx2.AsyncClient(headers={"Authorization": f"Bearer {key}"}, timeout=60)
                await stack.enter_async_context(client)
                streams = await stack.enter_async_context(
                    streamable_http_client(self.http.url, http_client=client)
                )
            session = await stack.enter_async_context(ClientSession(*streams))
            await session.initialize()
            yield session


@pytest.fixture(params=["stdio", "http"])
def transport(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def mcp_server(
    request: pytest.FixtureRequest, transport: str, deployment: Deployment,
    server_ledgers: dict[str, Ledger],
) -> Mcp:  # fmt: skip
    http = request.getfixturevalue("mcp_http") if transport == "http" else None
    return Mcp(transport, deployment, http, e2e.server_ledger(deployment, server_ledgers))
