"""The caller is checked before anything of the request is read: token, then role, then body.

FastAPI reads and parses a JSON (or form) body in the route's handler *before* it solves the
route's dependencies, so a body that is not JSON was a 422 for a caller without a token (and
for one without the admin role), and the app-wide query checks (`deps.single_valued_query`,
`deps.known_query`) ran before the token check too. Every API router is made with
`route_class=CallerFirstRoute`: its handler runs the route's own caller dependency
(`deps.get_principal`, and `deps.get_admin` where the route takes it) first, then FastAPI's
handler as usual, which finds the caller already known (`deps.get_principal` reads it back)
and so authenticates once. A stranger's request is answered 401 (a non-admin's 403 on an
admin route) whatever its body and query, and its body is never read.

`require_caller_first` makes a router that forgot the class a start-up error, not a route
that quietly validates before it authenticates.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine, Iterable
from typing import Any

from fastapi import Request, Response
from fastapi.routing import APIRoute

from iri_gateway.api.plumbing import deps

Handler = Callable[[Request], Coroutine[Any, Any, Response]]


class CallerFirstRoute(APIRoute):
    """An API route whose caller (if it has one) is checked before its body and query."""

    def get_route_handler(self) -> Handler:
        handler = super().get_route_handler()
        calls = set(deps.dependency_calls(self.dependant))
        if deps.get_principal not in calls:
            return handler  # a public operation: nobody to check
        admin_only = deps.get_admin in calls

        async def caller_first(request: Request) -> Response:
            await deps.check_caller(request, admin=admin_only)
            return await handler(request)

        return caller_first


def require_caller_first(routes: Iterable[Any]) -> None:
    """Refuse to build an app with an API route that would read its body before its caller
    (a router made without `route_class=CallerFirstRoute`)."""
    plain = sorted(
        f"{sorted(route.methods or ())} {route.path}"
        for route in routes
        if isinstance(route, APIRoute) and not isinstance(route, CallerFirstRoute)
    )
    if plain:
        raise TypeError(
            "these routes would validate a request before checking its caller; "
            "make their router with route_class=CallerFirstRoute: " + ", ".join(plain)
        )
