"""One log line per request (event `http.request`): when, which request, who, which
operation on which resource, the answer's status and how long it took.

It replaces uvicorn's access log (off, `cli.serving.stack`), which knows neither the caller
nor the operation and writes the raw path with its query string, where a client may have put
a token. Here the path is the route's template (`/api/v2/compute/job/{resource_id}`), never
the path or query the client sent; the user is the one `deps.get_principal` authenticated
(kept in the request's scope under `deps.AUTHENTICATED`, so the token is checked once, by
the route); headers and bodies are never read. Values a client controls (the request id, the
resource id) are fields of the line, which the formatter writes as JSON strings.

Inside `RequestIds`, so the request id is known; the trace id is read when the answer starts,
inside whatever span the tracing middleware opened.
"""

from __future__ import annotations

import logging
import time
from typing import Any

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway.api.plumbing.deps import AUTHENTICATED
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.operations.request_context import request_id, trace_id

EVENT = "http.request"
LOGGER = logging.getLogger("iri_gateway.access")


class AccessLog:
    """ASGI middleware: one `http.request` line per HTTP request, after its answer."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not LOGGER.isEnabledFor(logging.INFO):
            await self.app(scope, receive, send)
            return
        started = time.perf_counter()
        answer: dict[str, Any] = {"method": scope.get("method", ""), "status": 500}
        answer["trace_id"] = None

        async def watched(message: Message) -> None:
            if message["type"] == "http.response.start":
                answer["status"] = message["status"]
                answer["trace_id"] = trace_id()
            await send(message)

        try:
            await self.app(scope, receive, watched)
        finally:
            _log(scope, answer, (time.perf_counter() - started) * 1000)


def _log(scope: Scope, answer: dict[str, Any], duration_ms: float) -> None:
    route = scope.get("route")
    template = getattr(route, "path", None)
    operation = getattr(route, "operation_id", None) or getattr(route, "unique_id", None)
    status: int = answer["status"]
    method: str = answer["method"]
    client = scope.get("client")
    LOGGER.log(
        logging.ERROR if status >= 500 else logging.INFO,
        "%s %s %d",
        method,
        template or "(no route)",
        status,
        extra={
            "event": EVENT,
            "request_id": request_id(),
            "user": _user(scope),
            "operation": operation,
            "resource": (scope.get("path_params") or {}).get("resource_id"),
            "method": method,
            "route": template,
            "status": status,
            "duration_ms": round(duration_ms, 3),
            "trace_id": answer["trace_id"] or trace_id(),
            "client": client[0] if client else None,
        },
    )


def _user(scope: Scope) -> str | None:
    """The authenticated caller's user name, or None before (or without) authentication."""
    principal: Principal | None = scope.get(AUTHENTICATED)
    return principal.user if principal is not None else None
