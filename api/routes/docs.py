"""Swagger UI at `/docs`, served only when `LEDGER_DOCS` turns it on (`/openapi.json` is
always served: any OpenAPI tool reads it).

Swagger UI is not in the package: its page loads one pinned release of `swagger-ui-dist`
from a public CDN, each file checked by the browser against its hash (Subresource
Integrity), so the CDN can serve that release or nothing. The page runs no inline
script (its start-up script is served here), and its Content-Security-Policy allows
scripts from those two places only, no framing. It shares its origin with the viewer,
so turn it on where the docs are wanted: a development or staging server.
"""

from __future__ import annotations

from fastapi import APIRouter, Response

router = APIRouter(include_in_schema=False)
RELEASE = "https://cdn.jsdelivr.net/npm/swagger-ui-dist@5.35.0"
# sha384 of the files of the npm package swagger-ui-dist 5.35.0, as the CDN serves them.
BUNDLE = (f"{RELEASE}/swagger-ui-bundle.js",
          "sha384-gjRm0bEPMeTmMh5jT2cHccIwCUZSTd8YC+j0d0sXw0MdGEfScduGpSyF3ZSSLkX9")  # fmt: skip
STYLE = (f"{RELEASE}/swagger-ui.css",
         "sha384-WlYgdmXYOOBWL5apwjDEZwN+U3HmXSSu5R6V5aGxEcf7z+KuRNwBhoxKVN1i3D5I")  # fmt: skip
# Swagger UI sets style attributes as it renders: 'unsafe-inline' for styles, never scripts.
POLICY = (
    f"default-src 'none'; script-src 'self' {BUNDLE[0]}; "
    f"style-src {STYLE[0]} 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)
HEADERS = {
    "Content-Security-Policy": POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
PAGE = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>session-ledger API</title>
<link rel="stylesheet" href="{STYLE[0]}" integrity="{STYLE[1]}" crossorigin="anonymous">
</head>
<body>
<div id="swagger-ui"></div>
<script src="{BUNDLE[0]}" integrity="{BUNDLE[1]}" crossorigin="anonymous"></script>
<script src="docs/init.js"></script>
</body>
</html>
"""
INIT = """SwaggerUIBundle({
  url: "openapi.json",
  dom_id: "#swagger-ui",
  deepLinking: true,
  presets: [SwaggerUIBundle.presets.apis, SwaggerUIBundle.SwaggerUIStandalonePreset],
  layout: "BaseLayout",
});
"""


@router.get("/docs", response_class=Response)
def docs_page() -> Response:
    """The API's Swagger UI."""
    return Response(PAGE, media_type="text/html; charset=utf-8", headers=HEADERS)


@router.get("/docs/init.js", response_class=Response)
def docs_script() -> Response:
    """The script that starts Swagger UI on the OpenAPI document."""
    return Response(INIT, media_type="text/javascript; charset=utf-8", headers=HEADERS)
