"""A span per SQL statement the store runs inside a traced request (`iri_gateway.tracing`),
from SQLAlchemy's engine events: one hook covers every store method, SQLite and PostgreSQL.

The span is named after the statement's verb and table (`SELECT jobs`), read from its text,
and carries nothing else of it: never the statement's text, never its parameters (job
scripts, file names, users' values are parameters). Outside a traced request (the poller,
the heartbeat, tracing off) a statement costs one context look-up and makes no span.
"""

from __future__ import annotations

import re
from typing import Any

from opentelemetry.trace import Span, SpanKind
from sqlalchemy import event
from sqlalchemy.engine import Connection, Engine

from iri_gateway.tracing import current_tracer, failed

_SPAN = "iri_gateway.statement_span"
"""Where a connection keeps the span of the statement it runs (one at a time)."""

_VERB = re.compile(r"\s*(\w+)")
_TABLE = re.compile(r"\b(?:FROM|INTO|UPDATE|TABLE)\s+\"?([A-Za-z_][A-Za-z0-9_]*)", re.IGNORECASE)


def summary(statement: str) -> tuple[str, str | None]:
    """The statement's verb (upper case) and the first table it names, if any."""
    verb = _VERB.match(statement)
    table = _TABLE.search(statement)
    return (verb.group(1).upper() if verb else "SQL"), (table.group(1) if table else None)


def trace_statements(engine: Engine) -> None:
    """Have ENGINE's statements make spans inside traced requests."""
    event.listen(engine, "before_cursor_execute", _begin)
    event.listen(engine, "after_cursor_execute", _end)
    event.listen(engine, "handle_error", _error)


def _begin(connection: Connection, _cursor: Any, statement: str, *_rest: Any) -> None:
    tracer = current_tracer()
    if tracer is None:
        return
    _end(connection)  # a statement whose end was never seen (no event for it): ended now
    verb, table = summary(statement)
    attributes = {"db.system.name": connection.dialect.name, "db.operation.name": verb}
    if table is not None:
        attributes["db.collection.name"] = table
    name = f"{verb} {table}" if table else verb
    connection.info[_SPAN] = tracer.start_span(name, kind=SpanKind.CLIENT, attributes=attributes)


def _end(connection: Connection, *_rest: Any) -> None:
    span: Span | None = connection.info.pop(_SPAN, None)
    if span is not None:
        span.end()


def _error(context: Any) -> None:
    connection: Connection | None = context.connection
    if connection is None:
        return
    span: Span | None = connection.info.pop(_SPAN, None)
    if span is not None:
        failed(span, context.original_exception)
        span.end()
