"""Every request gets an id: the client's `X-Request-ID` (or `X-Correlation-ID`, FirecREST's
name) when it is well-formed, else a fresh one; echoed in the answer's `X-Request-ID` and
made known to the code serving the request (`service.operations.request_context`), so the
access log, the audit log and an operator reading both can tie them together."""

from __future__ import annotations

from starlette.datastructures import Headers, MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway.service.operations.request_context import accepted_request_id, serving_request

HEADER = "X-Request-ID"
ALTERNATIVE_HEADER = "X-Correlation-ID"


class RequestIds:
    """ASGI middleware: the request's id set for its duration and sent back in `HEADER`."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = Headers(scope=scope)
        identifier = accepted_request_id(headers.get(HEADER) or headers.get(ALTERNATIVE_HEADER))
        scope.setdefault("state", {})["request_id"] = identifier

        async def with_id(message: Message) -> None:
            if message["type"] == "http.response.start":
                MutableHeaders(scope=message)[HEADER] = identifier
            await send(message)

        with serving_request(identifier):
            await self.app(scope, receive, with_id)
