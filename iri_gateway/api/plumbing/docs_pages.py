"""The interactive API docs pages (`/docs`, Swagger UI; `/redoc`, ReDoc): off unless asked for.

These pages are served on the console's origin, where a signed-in tab keeps its bearer token
in sessionStorage. Their code (Swagger UI, ReDoc, several hundred kilobytes of JavaScript) is
not the gateway's and is loaded from a CDN (cdn.jsdelivr.net, a floating major version
without Subresource Integrity; ReDoc's fonts from Google): whoever serves that script can read
the token of a tab that opens the page. No maintained Python package ships these assets to
serve them from here (`swagger-ui-bundle` was last released in 2023; the maintained
`drf-spectacular-sidecar` is a Django app), so the pages are off by default (404, as any
unknown path) and the setting `api_docs` turns them on for a deployment that accepts that.

Turned on, each page carries a policy that allows exactly what it needs and nothing else:
scripts from the CDN (and Swagger UI's own inline start-up script, by its hash: no
'unsafe-inline' script), API calls only to this origin, no framing, no referrer.
`/openapi.json` is served whatever the setting (clients need it), and so is the same document
at `/api/v2/openapi.json`: the official IRI client toolkit (doe-iri/iri-facility-api-toolkit,
`VersionProber`) asks `GET /api/v2/openapi.json` and takes an HTTP 200 for "this facility
speaks v2", else tries `/api/v1/openapi.json` and falls back to v1; the IRI reference
implementation serves its document there too. Its docs page is `/api/v2` (the reference's
`docs_url`); `/api/v2/docs` is the same page. With the pages off, those two paths answer 404
saying so and where the document is, rather than the 404 of a path nobody knows.
"""

from __future__ import annotations

import base64
import hashlib
import re
from typing import Any

from fastapi import FastAPI, Request
from fastapi.openapi.docs import get_redoc_html, get_swagger_ui_html
from fastapi.responses import HTMLResponse, JSONResponse

from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.plumbing.security_headers import HEADERS

CDN = "https://cdn.jsdelivr.net"
FAVICON = "/console/static/favicon.svg"
VERSIONED_DOCUMENT = "/api/v2/openapi.json"
"""Where the IRI toolkit looks for the v2 document (see the module's docstring)."""
VERSIONED_PAGES = ("/api/v2", "/api/v2/docs")
_INLINE_SCRIPT = re.compile(r"<script>(.*?)</script>", re.DOTALL)


def _inline_hashes(html: str) -> str:
    """The CSP source of each inline script of `html`, by its SHA-256."""
    return " ".join(
        f"'sha256-{base64.b64encode(hashlib.sha256(body.encode()).digest()).decode()}'"
        for body in _INLINE_SCRIPT.findall(html)
    )


def _policy(*directives: str) -> str:
    common = (
        "connect-src 'self'",
        "img-src 'self' data:",
        "base-uri 'none'",
        "form-action 'none'",
        "frame-ancestors 'none'",
    )
    return "; ".join(("default-src 'none'", *directives, *common))


def _page(html: HTMLResponse, policy: str) -> HTMLResponse:
    html.headers.update({**HEADERS, "Content-Security-Policy": policy, "Cache-Control": "no-store"})
    return html


def swagger_page(title: str, document: str = "/openapi.json") -> HTMLResponse:
    """Swagger UI on `document`, its policy allowing the CDN and its start-up script."""
    html = get_swagger_ui_html(
        openapi_url=document, title=f"{title} - Swagger UI", swagger_favicon_url=FAVICON
    )
    text = bytes(html.body).decode()
    return _page(html, _policy(f"script-src {CDN} {_inline_hashes(text)}", f"style-src {CDN}"))


def redoc_page(title: str) -> HTMLResponse:
    """ReDoc on `/openapi.json`; ReDoc styles itself inline and renders in a blob: worker."""
    html = get_redoc_html(
        openapi_url="/openapi.json", title=f"{title} - ReDoc", redoc_favicon_url=FAVICON
    )
    return _page(
        html,
        _policy(
            f"script-src {CDN}",
            "style-src 'unsafe-inline' https://fonts.googleapis.com",
            "font-src https://fonts.gstatic.com",
            "worker-src blob:",
        ),
    )


def install(app: FastAPI, *, serve: bool) -> None:
    """The OpenAPI document at `/api/v2/openapi.json` always; `/docs`, `/redoc` and the
    versioned page (`/api/v2`, `/api/v2/docs`) when `serve` (the setting `api_docs`); with
    it off, the versioned page's paths answer 404 naming the setting (the app is made with
    FastAPI's own docs pages off)."""

    @app.get(VERSIONED_DOCUMENT, include_in_schema=False)
    async def versioned_document(request: Request) -> JSONResponse:
        document: dict[str, Any] = request.app.openapi()
        return JSONResponse(document)

    if not serve:

        async def pages_off() -> None:
            raise ApiProblem(
                404,
                "Not Found",
                "the API docs pages are off on this gateway (setting `api_docs`, "
                "IRI_GATEWAY_API_DOCS); the OpenAPI document is at "
                f"{VERSIONED_DOCUMENT} (and /openapi.json)",
            )

        for path in VERSIONED_PAGES:
            app.add_api_route(path, pages_off, methods=["GET"], include_in_schema=False)
        return

    async def versioned_swagger(request: Request) -> HTMLResponse:
        return swagger_page(request.app.title, VERSIONED_DOCUMENT)

    for path in VERSIONED_PAGES:
        app.add_api_route(path, versioned_swagger, methods=["GET"], include_in_schema=False)

    @app.get("/docs", include_in_schema=False)
    async def swagger(request: Request) -> HTMLResponse:
        return swagger_page(request.app.title)

    @app.get("/redoc", include_in_schema=False)
    async def redoc(request: Request) -> HTMLResponse:
        return redoc_page(request.app.title)
