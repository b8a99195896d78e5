"""Which request the current code serves: its request id, for the access log, the audit log
and error answers, and the trace it belongs to.

A context variable, set by the API's request-id middleware (`api/plumbing/request_ids.py`)
for the duration of one request, so the service layer can name the request without an HTTP
type: contextvars follow a request into the thread pool that runs sync routes (Starlette
copies the context) and stay unset in background threads (the poller, the submitter), where
`request_id()` is None. The trace id comes from OpenTelemetry's current span, which is
invalid (no id) while tracing is off.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from opentelemetry import trace

_REQUEST_ID: ContextVar[str | None] = ContextVar("iri_gateway_request_id", default=None)

REQUEST_ID_PATTERN = re.compile(r"[A-Za-z0-9._:@/+=-]{1,128}")
"""What a client's `X-Request-ID` may be to be kept: printable, no spaces, no quotes, at
most 128 characters, so it can go into a log line, a header and the store as it is."""


def new_request_id() -> str:
    """A fresh request id: 32 hex digits, as long as a W3C trace id."""
    return secrets.token_hex(16)


def accepted_request_id(offered: str | None) -> str:
    """The client's request id when it matches `REQUEST_ID_PATTERN`, else a fresh one (a
    malformed or missing header is never an error: the request is still served)."""
    if offered is not None and REQUEST_ID_PATTERN.fullmatch(offered):
        return offered
    return new_request_id()


def request_id() -> str | None:
    """The id of the request being served, or None outside one."""
    return _REQUEST_ID.get()


@contextmanager
def serving_request(identifier: str) -> Iterator[None]:
    """Mark the code run inside as serving the request IDENTIFIER."""
    token = _REQUEST_ID.set(identifier)
    try:
        yield
    finally:
        _REQUEST_ID.reset(token)


def trace_id() -> str | None:
    """The current trace's id as 32 hex digits, or None when no span is recording (tracing
    off, or outside a request)."""
    context = trace.get_current_span().get_span_context()
    if not context.is_valid:
        return None
    return format(context.trace_id, "032x")
