"""Every request counted and timed by its operation id, method and status (ASGI middleware).

Why the operation id and never the path: paths carry job ids, task ids and file names, one
series each would grow without end. The id is the matched route's OpenAPI `operationId`
(a console page or asset: its route's name); a path no route matches is `unmatched`. The
router leaves the matched route in the request's scope, which this middleware reads after
the answer: it sits inside `head.HeadAsGet` (which serves HEAD on a copy of the scope, as
GET: a HEAD is counted as GET) and outside the body limit (its 413s are counted).
"""

from __future__ import annotations

import time

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway.service.operations.metrics import Metrics

UNMATCHED = "unmatched"


class RequestMetrics:
    """ASGI middleware: one `Metrics.request` per HTTP request, when its answer is sent (or
    it failed: a 500)."""

    def __init__(self, app: ASGIApp, *, metrics: Metrics) -> None:
        self.app = app
        self.metrics = metrics

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        began = time.monotonic()
        status = 500

        async def noted(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = int(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, noted)
        finally:
            self.metrics.request(
                operation=self._operation(scope),
                method=str(scope["method"]),
                status=status,
                seconds=time.monotonic() - began,
            )

    def _operation(self, scope: Scope) -> str:
        route = scope.get("route")  # the router's match (for another method too: a 405)
        if route is None:
            return UNMATCHED
        return str(getattr(route, "operation_id", None) or getattr(route, "name", UNMATCHED))
