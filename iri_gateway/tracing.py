"""Spans around the slow steps (store statements, scheduler commands, SSH commands), made
only inside a traced request, with the tracer of the application serving it.

Why the tracer travels in the OpenTelemetry context instead of the API's global tracer
provider: the global can be set once per process, and a test process builds many
applications (each with its own settings, exporter or none). So each application's tracing
middleware (`api/plumbing/traces.py`) puts its own tracer into the context of the request it
serves; code below the API asks `span(...)` for a span and gets one from that tracer, or
nothing at all when tracing is off or no traced request is being served (the poller, the
reconcile: their work is not traced). The context follows a request into the thread pool
that runs sync routes (contextvars), and `carried` takes it into the submitter's workers,
so a submission's scheduler command continues the request's trace.

No OpenTelemetry SDK here, only the API: with tracing off the SDK is never imported.
Attributes are names chosen by the caller (resource ids, a command's program name, an SQL
verb), never user values: no command lines, no SQL text or parameters, no exception
messages (which quote command lines and scheduler output); a failure is recorded as its
exception class only.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, ExitStack, contextmanager
from typing import Concatenate, ParamSpec, TypeVar

from opentelemetry import context as otel_context
from opentelemetry.trace import Span, SpanKind, Status, StatusCode, Tracer

T = TypeVar("T")
S = TypeVar("S")
P = ParamSpec("P")

_TRACER = otel_context.create_key("iri_gateway.tracer")

Attributes = Mapping[str, str | int | bool]


def with_tracer(tracer: Tracer, parent: otel_context.Context) -> otel_context.Context:
    """PARENT with TRACER as the one `span` makes its spans with."""
    return otel_context.set_value(_TRACER, tracer, parent)


def current_tracer() -> Tracer | None:
    """The tracer of the traced request being served, or None (tracing off, or no request)."""
    tracer = otel_context.get_value(_TRACER)
    return tracer if isinstance(tracer, Tracer) else None


def failed(span: Span, error: BaseException) -> None:
    """Mark SPAN as failed by ERROR, naming only its class (its message may quote a command
    line or a scheduler's output)."""
    kind = type(error).__qualname__
    span.set_attribute("error.type", kind)
    span.set_status(Status(StatusCode.ERROR, kind))


@contextmanager
def span(
    name: str, attributes: Attributes, *, kind: SpanKind = SpanKind.INTERNAL
) -> Iterator[None]:
    """A child span NAME around the block when a traced request is being served; else
    nothing (one context look-up)."""
    tracer = current_tracer()
    if tracer is None:
        yield
        return
    with tracer.start_as_current_span(
        name,
        kind=kind,
        attributes=dict(attributes),
        record_exception=False,
        set_status_on_exception=False,
    ) as current:
        try:
            yield
        except BaseException as error:
            failed(current, error)
            raise


def carried(work: Callable[[], T]) -> Callable[[], T]:
    """WORK, to be run on another thread in the trace (and with the tracer) of the code that
    hands it over now; a thread of its own has an empty context otherwise."""
    if current_tracer() is None:
        return work  # nothing to carry: tracing off, or not in a traced request
    handed = otel_context.get_current()

    def in_trace() -> T:
        token = otel_context.attach(handed)
        try:
            return work()
        finally:
            otel_context.detach(token)

    return in_trace


def _command_span(transport: str, argv: Sequence[str]) -> AbstractContextManager[None]:
    """The span of one command run through TRANSPORT: named after its program only
    (argv[0]'s last part), never its arguments, which carry user values."""
    program = os.path.basename(argv[0]) if argv else ""
    return span(
        f"{transport} {program}",
        {"iri.transport": transport, "process.executable.name": program},
        kind=SpanKind.CLIENT,
    )


def traced_run(
    transport: str,
) -> Callable[
    [Callable[Concatenate[S, Sequence[str], P], T]], Callable[Concatenate[S, Sequence[str], P], T]
]:
    """Decorator: a transport's `run(argv, ...)` inside a command span (`_command_span`)."""

    def decorate(
        run: Callable[Concatenate[S, Sequence[str], P], T],
    ) -> Callable[Concatenate[S, Sequence[str], P], T]:
        @functools.wraps(run)
        def traced(self: S, argv: Sequence[str], /, *args: P.args, **kwargs: P.kwargs) -> T:
            with _command_span(transport, argv):
                return run(self, argv, *args, **kwargs)

        return traced

    return decorate


def traced_stream(
    transport: str,
) -> Callable[
    [Callable[Concatenate[S, Sequence[str], P], AbstractContextManager[T]]],
    Callable[Concatenate[S, Sequence[str], P], AbstractContextManager[T]],
]:
    """Decorator: a transport's `stream(argv, ...)` (a context manager) with a command span
    around its start (session opened, command sent). Only its start: a warm file agent's
    stream outlives the request that opened it, serving later ones."""

    def decorate(
        stream: Callable[Concatenate[S, Sequence[str], P], AbstractContextManager[T]],
    ) -> Callable[Concatenate[S, Sequence[str], P], AbstractContextManager[T]]:
        @functools.wraps(stream)
        @contextmanager
        def traced(
            self: S, argv: Sequence[str], /, *args: P.args, **kwargs: P.kwargs
        ) -> Iterator[T]:
            with ExitStack() as stack:
                with _command_span(transport, argv):
                    opened = stack.enter_context(stream(self, argv, *args, **kwargs))
                yield opened

        return traced

    return decorate


def scheduler_span(action: str, resource_id: str, scheduler: str) -> AbstractContextManager[None]:
    """The span of one scheduler command (`submit`, `cancel`) for a resource."""
    return span(
        f"scheduler {action}",
        {"iri.resource": resource_id, "iri.scheduler": scheduler, "iri.scheduler.action": action},
        kind=SpanKind.CLIENT,
    )
