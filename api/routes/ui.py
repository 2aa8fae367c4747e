"""The audit viewer's static files at `/ui`: an HTML page, ES modules and a style sheet,
served as they are in the package (no build step), under a Content-Security-Policy that
lets the page run only these files.

The page holds no data of its own: it asks the HTTP API with the API key the user types
in, which it keeps in the browser's sessionStorage and sends as `Authorization: Bearer`.
"""

from __future__ import annotations

import functools
from importlib.resources import files
from typing import Annotated

from fastapi import APIRouter, Path, Response

from ..http_errors import error_response

router = APIRouter(prefix="/ui", tags=["viewer"], include_in_schema=False)
MEDIA_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
}
# Scripts and styles from these files only (no inline script, no eval, no inline style);
# images from the page or from data: URLs (images stored inside messages), nothing
# fetched from elsewhere, no framing, no form posts.
POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
    "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Frame-Options": "DENY",  # frame-ancestors, for browsers that know no CSP
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    # Revalidate: a new version of the package serves new files at the same names.
    "Cache-Control": "no-cache",
}


@functools.cache
def ui_files() -> dict[str, bytes]:
    """The viewer's files by name, read once from the package."""
    folder = files("session_ledger.api") / "ui"
    return {
        f.name: f.read_bytes()
        for f in folder.iterdir()
        if f.is_file() and "." + f.name.rpartition(".")[2] in MEDIA_TYPES
    }


def _file(name: str) -> Response:
    body = ui_files().get(name)
    if body is None:
        return error_response(404, "not_found", f"the viewer has no file {name!r}", headers=HEADERS)
    media_type = MEDIA_TYPES["." + name.rpartition(".")[2]]
    return Response(body, media_type=media_type, headers=HEADERS)


@router.get("", response_class=Response)
def viewer_page() -> Response:
    """The viewer's page."""
    return _file("index.html")


@router.get("/{name}", response_class=Response)
def viewer_file(name: Annotated[str, Path(max_length=64)]) -> Response:
    """One of the viewer's scripts or its style sheet."""
    return _file(name)
