"""Typed FastAPI dependencies: the engine, the caller, the settings."""

from __future__ import annotations

import types
import typing
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Annotated, Any

from fastapi import Depends, Request
from fastapi.exceptions import RequestValidationError
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.plumbing.rate_limit import charge_request
from iri_gateway.api.plumbing.token_use import check_token_use
from iri_gateway.api.sign_in.cookies import session_cookie, session_principal
from iri_gateway.service.accounts.auth import Authenticator, Principal
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.settings import Settings

_bearer = HTTPBearer(auto_error=False)


# Dependencies are `async def` on purpose: they only read app state, and a sync dependency
# would be sent to the thread pool on every request.
async def get_engine(request: Request) -> Engine:
    engine: Engine = request.app.state.engine
    return engine


async def get_settings_dep(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


_CALLER = "iri_gateway.caller"
"""The scope key under which `check_caller` keeps the caller for the route's dependencies."""
AUTHENTICATED = "iri_gateway.authenticated"
"""The scope key of the caller as soon as the token is accepted (before the rate limit and the
admin check): who the access log and the audit log name, also for a call refused after that
point (the token is checked once, here)."""


async def get_principal(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
) -> Principal:
    """The caller: a bearer token's, else the console session's (`sign_in.cookies`; the
    OpenAPI names it as the scheme `consoleSession`, `sign_in.cookies.SECURITY_SCHEME`)."""
    known: Principal | None = request.scope.get(_CALLER)
    if known is not None:
        return known  # checked by `check_caller` before the body was read
    authenticator: Authenticator = request.app.state.authenticator
    token = credentials.credentials if credentials else None
    cookie = session_cookie(request) if token is None else None
    if cookie is not None:  # the console signed in by OpenID: its session's access token
        principal = await session_principal(request, cookie)
    elif authenticator.may_block:  # keys fetched, the provider asked: not on the event loop
        principal = await run_in_threadpool(authenticator.authenticate, token)
    else:
        principal = authenticator.authenticate(token)
    request.scope[AUTHENTICATED] = principal  # for the access and audit logs
    check_token_use(request, principal)
    charge_request(request, principal)
    return principal


async def get_admin(
    request: Request, principal: Annotated[Principal, Depends(get_principal)]
) -> Principal:
    """The caller, if a facility admin; anybody else is refused (403) before the route's body
    is looked at, so a refused call costs nothing."""
    if not principal.admin:
        raise ApiProblem(
            403,
            "Forbidden",
            f"user {principal.user!r} is not a facility admin, "
            f"and only facility admins may call {request.method} "
            f"{request.url.path}; {principal.admin_hint}",
        )
    return principal


async def check_caller(request: Request, *, admin: bool) -> Principal:
    """The caller of `request` (401 without a valid token; 403 if `admin` and not an admin),
    found before FastAPI reads the body (`caller_first`) and kept for `get_principal`."""
    principal = await get_principal(request, await _bearer(request))
    if admin:
        await get_admin(request, principal)
    request.scope[_CALLER] = principal
    return principal


ADMIN_ONLY = {
    "description": "The caller's token is not a facility admin's; the problem's "
    "detail says how an administrator grants the role (`iri-gateway token USER "
    "--admin`, or the identity provider's admin role)"
}
"""The 403 of an admin-only route, for its OpenAPI `responses`."""


def _takes_many(annotation: Any) -> bool:
    """True for `list[...]`, `set[...]`, `tuple[...]`, also inside `Optional` or `Annotated`."""
    origin = typing.get_origin(annotation)
    if origin is Annotated:
        return _takes_many(typing.get_args(annotation)[0])
    if origin in (typing.Union, types.UnionType):
        return any(_takes_many(arg) for arg in typing.get_args(annotation))
    return (origin or annotation) in (list, set, frozenset, tuple)


def dependency_calls(dependant: Any) -> Iterator[Callable[..., Any]]:
    """Every dependency function of a route, sub-dependencies included."""
    for sub in getattr(dependant, "dependencies", []):
        if sub.call is not None:
            yield sub.call
        yield from dependency_calls(sub)


def _query_fields(dependant: Any) -> Iterator[tuple[str, Any]]:
    """(name, annotation) of every query parameter of a route and its sub-dependencies."""
    for field in getattr(dependant, "query_params", []):
        yield field.alias, field.field_info.annotation
    for sub in getattr(dependant, "dependencies", []):
        yield from _query_fields(sub)


@dataclass(frozen=True)
class _RouteQuery:
    """What the query checks need to know of one route, worked out once per route."""

    single: tuple[str, ...]
    """The parameters that take one value, in the route's order."""
    accepted: frozenset[str]
    offered: str
    """The accepted names, as an error lists them."""


_ROUTE_QUERY = "_iri_gateway_query"
"""The attribute under which a route keeps its `_RouteQuery`: walking a route's dependency
tree on every request cost more than the rest of a status read, and a route and its
dependencies do not change once the app is built (routes are not hashable, so they are not
keys of a map; kept on the route, it goes with its app)."""


def _route_query(route: Any) -> _RouteQuery:
    known: _RouteQuery | None = getattr(route, _ROUTE_QUERY, None)
    if known is None:
        fields = dict(_query_fields(getattr(route, "dependant", None)))
        accepted = sorted(fields)
        known = _RouteQuery(
            single=tuple(name for name, kind in fields.items() if not _takes_many(kind)),
            accepted=frozenset(accepted),
            offered=", ".join(accepted) if accepted else "no query parameters",
        )
        if route is not None:
            setattr(route, _ROUTE_QUERY, known)
    return known


async def single_valued_query(request: Request) -> None:
    """A query parameter that takes one value must be given once: FastAPI would keep the
    last of `?offset=abc&offset=0` and silently ignore the others (a 422 here instead)."""
    if not request.scope.get("query_string"):
        return
    items = request.query_params.multi_items()
    counts = Counter(name for name, _ in items)
    if len(counts) == len(items):
        return  # no name given twice
    single = _route_query(request.scope.get("route")).single
    errors = [
        {
            "type": "repeated",
            "loc": ("query", name),
            "msg": "given more than once; this parameter takes one value",
            "input": request.query_params.getlist(name),
        }
        for name in single
        if counts[name] > 1
    ]
    if errors:
        raise RequestValidationError(errors)


UNKNOWN_QUERY = "x-iri-gateway-unknown-query-parameters"
"""The OpenAPI extension saying that a query parameter the operation does not define is
refused (`known_query`); OpenAPI itself has no word for it."""


async def known_query(request: Request) -> None:
    """Every query parameter must be one the operation defines: a misspelt `offest` or `limt`
    would otherwise be ignored and the request answered as if it were absent (a 422 naming
    each unknown one and the accepted ones instead). The console's pages (not in the
    OpenAPI) read their own query in the browser and are left alone."""
    if not request.scope.get("query_string"):
        return
    route = request.scope.get("route")
    if route is None or not getattr(route, "include_in_schema", True):
        return
    known = _route_query(route)
    unknown = sorted({name for name, _ in request.query_params.multi_items()} - known.accepted)
    if unknown:
        raise RequestValidationError(
            [
                {
                    "type": "unknown",
                    "loc": ("query", name),
                    "input": request.query_params[name],
                    "msg": f"unknown query parameter; this operation takes {known.offered}",
                }
                for name in unknown
            ]
        )


async def known_resource(
    resource_id: str,
    engine: Annotated[Engine, Depends(get_engine)],
    principal: Annotated[Principal, Depends(get_principal)],
) -> str:
    """The path's `resource_id`, once the caller is known and the resource found: an unknown
    resource is a 404 whatever the body (dependencies are solved before the body is
    validated)."""
    engine.resource(resource_id=resource_id)
    return resource_id


EngineDep = Annotated[Engine, Depends(get_engine)]
KnownResource = Annotated[str, Depends(known_resource)]
SettingsDep = Annotated[Settings, Depends(get_settings_dep)]
PrincipalDep = Annotated[Principal, Depends(get_principal)]
AdminDep = Annotated[Principal, Depends(get_admin)]
