"""Browser-facing protection on every answer of the gateway's origin, the console's origin.

The console keeps a signed-in user's bearer token in the tab's sessionStorage, readable by any
script that runs on this origin. So any answer a browser may render here (an API error, a
downloaded file opened in a tab, `/openapi.json`) carries a policy that runs nothing, loads
nothing and cannot be framed: `Content-Security-Policy: default-src 'none'; frame-ancestors
'none'; ...`, `X-Frame-Options: DENY` (browsers without frame-ancestors), `X-Content-Type-
Options: nosniff` (no sniffing a JSON or text answer into HTML or script) and `Referrer-
Policy: no-referrer`. An answer that sets its own (the console's pages, the API docs pages
when served) keeps its own value; the others are added.
"""

from __future__ import annotations

from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_POLICY = "default-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
"""The policy of an answer that names none: nothing runs, loads or frames it."""
HEADERS = {
    "Content-Security-Policy": DEFAULT_POLICY,
    "X-Frame-Options": "DENY",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


class SecurityHeaders:
    """ASGI middleware: `HEADERS` added to every HTTP answer that does not set them itself."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = MutableHeaders(scope=message)
                for name, value in HEADERS.items():
                    if name not in headers:
                        headers[name] = value
            await send(message)

        await self.app(scope, receive, with_headers)
