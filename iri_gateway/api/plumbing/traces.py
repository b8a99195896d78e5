"""One server span per request, named after its operation id, continuing the caller's W3C
trace (`traceparent`) when it sends a well-formed one.

Why our own middleware rather than opentelemetry-instrumentation-asgi/-fastapi or FastAPI's
own telemetry (`FastAPI(telemetry=...)`): they record the raw URL (`url.path`, `url.query`:
a filesystem request's path is a user's file name), by default open more spans (each send
and receive of the body, dependencies, serialization) and read the caller's trace with the
process-wide propagator; this one records only the route's template and operation id, and
uses the tracer of the application it wraps.

It is the outermost middleware, so every other layer (the request id, the access log, the
routes and what they call) runs inside the span and `request_context.trace_id()` names its
trace. The tracer goes into the request's context (`iri_gateway/tracing.py`), where the
store, the submitter and the transports find it.

A malformed, oversized or repeated `traceparent` is ignored (the request starts a new
trace), never an error: W3C's parsing is the OpenTelemetry API's, given a `traceparent` only
when the request has exactly one, and a `tracestate` (several headers are one list) only
when it is at most `HEADER_LIMIT` characters long.
"""

from __future__ import annotations

from collections.abc import Callable

from fastapi import FastAPI
from fastapi.routing import APIRoute
from opentelemetry import context as otel_context
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator
from starlette.datastructures import Headers
from starlette.middleware import Middleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway import __version__
from iri_gateway.service.operations.settings import Settings
from iri_gateway.service.operations.tracing_export import INSTRUMENTATION_NAME, tracer_provider
from iri_gateway.tracing import failed, with_tracer

HEADER_LIMIT = 512
"""Longest `traceparent` or `tracestate` considered (W3C lets a server drop a `tracestate`
longer than 512 characters; a version-00 `traceparent` has 55)."""

METHODS = frozenset(
    {"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS", "TRACE", "CONNECT"}
)
"""Methods recorded as they are; any other is `_OTHER` (semantic conventions), so a client
cannot put words of its own into the span."""

_W3C = TraceContextTextMapPropagator()


def _caller_context(scope: Scope) -> otel_context.Context:
    """The caller's trace as its headers carry it, on an empty context (none: empty)."""
    headers = Headers(scope=scope)
    parents = headers.getlist("traceparent")
    if len(parents) != 1 or len(parents[0]) > HEADER_LIMIT:
        return otel_context.Context()
    carrier = {"traceparent": parents[0]}
    state = ",".join(headers.getlist("tracestate"))
    if state and len(state) <= HEADER_LIMIT:
        carrier["tracestate"] = state
    return _W3C.extract(carrier, context=otel_context.Context())


ROUTE_NOTED = "iri_gateway.route"
"""Where `RouteNoted` leaves the route that served the request, in the scope's `state` (one
dict shared by every copy of the scope the middlewares make: `HeadAsGet` passes a copy)."""


class RouteNoted:
    """ASGI middleware, innermost: notes the route the router chose (Starlette's
    `scope["route"]`) where the outer `Traces` can read it once the request is served."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await self.app(scope, receive, send)
        finally:
            if "route" in scope and isinstance(scope.get("state"), dict):
                scope["state"][ROUTE_NOTED] = scope["route"]


class Traces:
    """ASGI middleware: each HTTP request served inside a server span of `tracer`."""

    def __init__(self, app: ASGIApp, *, tracer: Tracer) -> None:
        self.app = app
        self.tracer = tracer

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method = scope["method"] if scope["method"] in METHODS else "_OTHER"
        status: list[int] = []
        state = scope.setdefault("state", {})

        async def noting_status(message: Message) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)

        token = otel_context.attach(with_tracer(self.tracer, _caller_context(scope)))
        try:
            with self.tracer.start_as_current_span(
                method,
                kind=SpanKind.SERVER,
                attributes={"http.request.method": method, "url.scheme": scope["scheme"]},
                record_exception=False,
                set_status_on_exception=False,
            ) as span:
                try:
                    await self.app(scope, receive, noting_status)
                except BaseException as error:
                    failed(span, error)
                    if not status:
                        status.append(500)  # what the server's error handler answers
                    raise
                finally:
                    route = state.get(ROUTE_NOTED)
                    if isinstance(route, BaseRoute):
                        template = getattr(route, "path", "")
                        operation = route.operation_id if isinstance(route, APIRoute) else None
                        span.update_name(operation or f"{method} {template}")
                        span.set_attribute("http.route", template)
                        if operation:
                            span.set_attribute("iri.operation_id", operation)
                    request_id = state.get("request_id")
                    if isinstance(request_id, str):
                        span.set_attribute("iri.request_id", request_id)
                    if status:
                        span.set_attribute("http.response.status_code", status[0])
                        if status[0] >= 500:
                            span.set_status(Status(StatusCode.ERROR))
        finally:
            otel_context.detach(token)


def install(app: FastAPI, settings: Settings) -> Callable[[], None]:
    """The tracing middleware on APP, outermost, when the settings turn tracing on; returns
    what ends it at shutdown (exporting the spans still waiting)."""
    provider = tracer_provider(settings)
    if provider is None:
        return lambda: None
    tracer = provider.get_tracer(INSTRUMENTATION_NAME, __version__)
    app.add_middleware(Traces, tracer=tracer)
    app.user_middleware.append(Middleware(RouteNoted))  # innermost: sees the router's scope
    return provider.shutdown
