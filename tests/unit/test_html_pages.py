"""The service's HTML pages: the API docs are off unless LEDGER_DOCS turns them on (the
OpenAPI document is always served); when on, their scripts are one pinned release with
its integrity hash, under a Content-Security-Policy; no page can be framed."""

from __future__ import annotations

import asyncio
import re

import httpx

from session_ledger.api.app import create_app
from session_ledger.api.bootstrap import open_ledger
from session_ledger.api.keystore import MemoryKeyStore
from session_ledger.api.settings import Settings


def answers(docs: bool, *paths: str) -> dict[str, httpx.Response]:
    settings = Settings(database_url="memory://", docs=docs)
    ledger = open_ledger(settings)
    app = create_app(settings, ledger=ledger, key_store=MemoryKeyStore())

    async def get() -> dict[str, httpx.Response]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://ledger") as http:
            return {path: await http.get(path) for path in paths}

    try:
        return asyncio.run(get())
    finally:
        ledger.close()


def test_the_docs_are_off_by_default_and_the_openapi_document_is_served() -> None:
    found = answers(False, "/docs", "/redoc", "/docs/oauth2-redirect", "/openapi.json")
    assert {path: a.status_code for path, a in found.items()} == {
        "/docs": 404, "/redoc": 404, "/docs/oauth2-redirect": 404, "/openapi.json": 200,
    }  # fmt: skip


def test_docs_when_on_load_one_pinned_release_checked_by_its_hash() -> None:
    found = answers(True, "/docs", "/docs/init.js", "/redoc")
    page = found["/docs"]
    assert page.status_code == 200
    tags = re.findall(r"<(?:script|link)\b[^>]*>", page.text)
    external = [t for t in tags if "https://" in t]
    assert len(external) == 2  # the bundle and its style sheet
    for tag in external:
        assert re.search(r"swagger-ui-dist@\d+\.\d+\.\d+/", tag), tag  # a release, not "@5"
        assert re.search(r'integrity="sha384-[A-Za-z0-9+/=]{64}"', tag), tag
        assert 'crossorigin="anonymous"' in tag
    assert "<script>" not in page.text  # no inline script: the policy allows none
    policy = page.headers["Content-Security-Policy"]
    assert (
        "frame-ancestors 'none'" in policy
        and "'unsafe-inline'" not in policy.split("script-src")[1].split(";")[0]
    )
    assert page.headers["X-Frame-Options"] == "DENY"
    assert found["/docs/init.js"].status_code == 200
    assert found["/redoc"].status_code == 404


def test_no_html_page_may_be_framed() -> None:
    found = answers(True, "/docs", "/ui", "/ui/index.html", "/ui/nothing.html")
    for path, answer in found.items():
        assert answer.headers["X-Frame-Options"] == "DENY", path
        assert "frame-ancestors 'none'" in answer.headers["Content-Security-Policy"], path
