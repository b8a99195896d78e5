"""HEAD on every GET route: answered like GET, without the body (RFC 9110 section 9.3.2).

FastAPI's routes serve only the methods they name, so HEAD on a GET route was a 405. This
middleware hands a HEAD request on as a GET and drops the body of the answer, keeping its
status and headers (`Content-Length` included, as GET would send it). HEAD where no GET is
served still answers 405, its `Allow` naming the methods that are.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Message, Receive, Scope, Send


class HeadAsGet:
    """ASGI middleware: HEAD answered as GET without a body."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "HEAD":
            await self.app(scope, receive, send)
            return

        async def without_body(message: Message) -> None:
            if message["type"] == "http.response.body":
                message = {**message, "body": b""}
            await send(message)

        await self.app({**scope, "method": "GET"}, receive, without_body)
