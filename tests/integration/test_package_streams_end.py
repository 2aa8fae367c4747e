"""A package's answer gives back what it holds when it ends, however it ends: a download
the client abandons after a chunk leaves no temporary folder and no open file behind
(with the server cancelling the answer, as uvicorn does on a disconnect, or its `send`
failing, as ASGI 2.4 servers say a disconnect), and a process builds at most
`max_package_builds` packages at once (one more: 429 too_many_package_builds), each
slot free again once its answer ends or is abandoned."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import os
import secrets
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import pytest
from fastapi import FastAPI

from session_ledger.api.app import create_app
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings
from session_ledger.domain.ledger import Ledger
from tests.conftest import make_ledger, make_settings

pytestmark = pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="needs /proc")
PREFIXES = ("ledger-package-", "ledger-rsmf-")


class Download:
    """One GET of the app, driven as a server would: `stop_after` body chunks taken, the
    client reads no more; with `hang_up` it is gone then, else when `gone` is set (the
    server cancels the answer: `http.disconnect`, or, with `send_fails`, its next `send`
    raises OSError as an ASGI 2.4 server's does)."""

    def __init__(self, secret: str, query: dict[str, str], stop_after: int | None = None,
                 hang_up: bool = True, send_fails: bool = False) -> None:  # fmt: skip
        self.secret, self.query = secret, query
        self.stop_after, self.hang_up, self.send_fails = stop_after, hang_up, send_fails
        self.status = 0
        self.headers: dict[str, str] = {}
        self.chunks: list[bytes] = []
        self.started = asyncio.Event()  # the first body chunk was sent
        self.gone = asyncio.Event()  # the client hung up
        self.requested = False

    async def receive(self) -> dict[str, Any]:
        if not self.requested:
            self.requested = True
            return {"type": "http.request", "body": b"", "more_body": False}
        await self.gone.wait()
        return {"type": "http.disconnect"}

    async def send(self, message: dict[str, Any]) -> None:
        if message["type"] == "http.response.start":
            self.status = message["status"]
            self.headers = {k.decode(): v.decode() for k, v in message["headers"]}
            return
        if self.gone.is_set() and self.send_fails:
            raise OSError("the client hung up")
        if message.get("body"):
            self.chunks.append(message["body"])
            self.started.set()
        if self.stop_after is not None and len(self.chunks) >= self.stop_after:
            if self.hang_up:
                self.gone.set()
            if not (self.send_fails and self.gone.is_set()):
                await asyncio.Event().wait()  # a client that reads no more

    async def __call__(self, app: FastAPI) -> Download:
        scope = {
            "type": "http", "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": "1.1", "method": "GET", "scheme": "http", "path": "/v1/package",
            "raw_path": b"/v1/package", "query_string": urlencode(self.query).encode(),
            "root_path": "", "headers": [(b"authorization", f"Bearer {self.secret}".encode())],
            "client": ("127.0.0.1", 50000), "server": ("testserver", 80), "state": {},
        }  # fmt: skip
        if self.send_fails:
            scope["asgi"]["spec_version"] = "2.4"
        with contextlib.suppress(OSError, Exception):  # (ClientDisconnect, raised on)
            await app(scope, self.receive, self.send)
        return self


@pytest.fixture
def temp_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A temporary directory of the test's own (other tests may build packages at once)."""
    folder = tmp_path / "tmp"
    folder.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    return folder


def left_behind(temp_dir: Path) -> tuple[list[str], list[str]]:
    """(the package folders in `temp_dir`, the files in it this process holds open)."""
    folders = sorted(p.name for p in temp_dir.iterdir() if p.name.startswith(PREFIXES))
    open_files = []
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/self/fd/{fd}")
            if target.startswith(str(temp_dir)):
                open_files.append(target)
    return folders, open_files


@contextlib.contextmanager
def no_collector() -> Iterator[None]:
    """The garbage collector off: what is given back must be given back by the answer's
    end, not by a collection that happens to run (the defect: only one ever did)."""
    gc.collect()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


def serving(tmp_path: Path, **settings: Any) -> tuple[Ledger, FastAPI, str]:
    config: Settings = make_settings("sqlite", tmp_path, **settings)
    ledger = make_ledger(config)
    for n in range(3):  # sessions enough that a package is many chunks
        random = [{"role": "user", "content": secrets.token_hex(2000)} for _ in range(40)]
        ledger.put_messages(f"case/{n}", random)  # (random: RSMF's zip is no smaller)
    keys = MemoryKeyStore()
    _, secret = keys.create(config.default_tenant, "auditor")
    return ledger, create_app(config, ledger=ledger, key_store=keys), secret


@pytest.mark.parametrize("send_fails", [False, True], ids=["cancelled", "send-fails"])
@pytest.mark.parametrize("format", ["tar", "rsmf"])
def test_an_abandoned_download_leaves_no_folder_and_no_open_file(
    tmp_path: Path, temp_dir: Path, format: str, send_fails: bool
) -> None:
    """Checked as soon as the answer returns, on its loop, as a server goes on serving
    (`asyncio.run` closes what is left of abandoned async generators when it ends)."""
    ledger, app, secret = serving(tmp_path)

    async def abandoned() -> None:
        for _ in range(3):
            download = Download(secret, {"format": format}, stop_after=2, send_fails=send_fails)
            await download(app)
            assert download.status == 200 and len(download.chunks) == 2
            assert left_behind(temp_dir) == ([], [])

    try:
        with no_collector():
            asyncio.run(abandoned())
    finally:
        ledger.close()


@pytest.mark.parametrize("format", ["tar", "rsmf"])
def test_a_whole_download_leaves_nothing_behind(
    tmp_path: Path, temp_dir: Path, format: str
) -> None:
    ledger, app, secret = serving(tmp_path)

    async def whole() -> None:
        download = await Download(secret, {"format": format})(app)
        assert download.status == 200 and sum(map(len, download.chunks)) > 100_000
        assert left_behind(temp_dir) == ([], [])

    try:
        with no_collector():
            asyncio.run(whole())
    finally:
        ledger.close()


def test_builds_over_the_limit_are_refused_until_one_ends(tmp_path: Path, temp_dir: Path) -> None:
    ledger, app, secret = serving(tmp_path, max_package_builds=2)

    async def scenario() -> None:
        held = [Download(secret, {"format": f}, 1, hang_up=False) for f in ("tar", "rsmf")]
        running = [asyncio.create_task(d(app)) for d in held]
        for d in held:
            await asyncio.wait_for(d.started.wait(), 60)  # (a bound, not a measurement)
        for format in ("tar", "rsmf"):
            refused = await Download(secret, {"format": format})(app)
            assert refused.status == 429, refused.chunks
            assert refused.headers["retry-after"] == "5"
            body = b"".join(refused.chunks)
            assert b'"code":"too_many_package_builds"' in body and b"retry" in body
        held[0].gone.set()  # one client hangs up: its slot is free again
        await running[0]
        whole = await Download(secret, {})(app)  # a build that ends whole ...
        assert whole.status == 200
        again = Download(secret, {}, 1, hang_up=False)  # ... gives its slot back too
        second = asyncio.create_task(again(app))
        await asyncio.wait_for(again.started.wait(), 60)
        assert (await Download(secret, {})(app)).status == 429
        for d in (held[1], again):
            d.gone.set()
        await asyncio.gather(running[1], second)
        assert [(await Download(secret, {})(app)).status for _ in range(2)] == [200, 200]

    try:
        asyncio.run(scenario())
        assert left_behind(temp_dir) == ([], [])
        assert app.state.package_builds.running == 0
    finally:
        ledger.close()


def test_a_build_that_fails_gives_its_slot_back(
    tmp_path: Path, temp_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    ledger, app, secret = serving(tmp_path, max_package_builds=1)
    from session_ledger.api.routes import package_routes

    def failing(*args: Any, **kwargs: Any) -> Any:
        raise RuntimeError("the build failed")

    try:
        with monkeypatch.context() as patched:
            patched.setattr(package_routes, "write_rsmf", failing)
            for _ in range(2):
                with contextlib.suppress(RuntimeError):
                    failed = asyncio.run(Download(secret, {"format": "rsmf"})(app))
                    assert failed.status == 500
        assert asyncio.run(Download(secret, {"format": "rsmf"})(app)).status == 200
        assert app.state.package_builds.running == 0
        assert left_behind(temp_dir) == ([], [])
    finally:
        ledger.close()


@pytest.mark.parametrize("end", ["whole", "cancelled", "send-fails", "server-stops"])
def test_a_closing_stream_closes_its_iterator_and_ends_once(end: str) -> None:
    """However the answer ends (also when the server cancels its task as it stops), its
    generator's `finally` has run and `on_end` was called once, by the time it returns."""
    from session_ledger.api.routes.export_routes import ClosingStream

    events: list[str] = []

    def body() -> Iterator[bytes]:
        try:
            for n in range(100):
                yield b"x" * 1000 + str(n).encode()
        finally:
            events.append("closed")

    async def answer() -> None:
        response = ClosingStream(body(), on_end=lambda: events.append("ended"))
        stop_after = None if end == "whole" else 2
        hang_up, send_fails = end != "server-stops", end == "send-fails"
        download = Download("", {}, stop_after, hang_up=hang_up, send_fails=send_fails)
        scope = {"type": "http", "asgi": {"spec_version": "2.4" if send_fails else "2.3"}}
        download.requested = True
        task = asyncio.create_task(response(scope, download.receive, download.send))
        if end == "server-stops":
            await asyncio.wait_for(download.started.wait(), 60)
            await asyncio.sleep(0)
            task.cancel()
        with contextlib.suppress(BaseException):
            await task
        assert events == ["closed", "ended"]
        assert end != "whole" or len(download.chunks) == 100

    with no_collector():
        asyncio.run(answer())
