"""The audit log at the API: every state-changing call recorded, in one place, by operation.

Why here and not in each service function: one middleware sees every call the same way,
whatever route serves it, so a new write route is audited without anyone remembering to; and
it sees the calls that never reach the service, the refused ones (403, 404, 409, 422, 413),
which are worth recording too. What is recorded (`audited`): every request the rate limits
count as a write (not a GET or HEAD, not one of the POSTs that only look, `reads.py`),
and every admin-only operation whatever its method (a profile check, a non-admin's try at
the audit), except an admin's successful read of the audit itself. Not recorded: a request
without a valid token (401: a stranger could otherwise grow the table without limit, as no
rate applies before the caller is known) and a 429 (the rate limit refused it before
anything was looked at; recording each would let a flood write to the store at its own
rate); both are in the access log.

The record is written when the answer is complete and before its first byte is sent: a
client that got a success knows the record is committed. The answer of an audited call is
held (it is small: a job, a task, a problem) up to `HELD_BYTES`; a longer one is recorded
once that much has come, then sent as it comes. The write runs in a worker thread, never on
the event loop.
A record that cannot be written (the database away) does not fail the call, whose change is
made already: it is logged at ERROR with every field (`audit record lost`), so an operator
sees it and has it. A process killed between the change and the record loses the record
(the job's own history and the task still show the change): the limit of recording at the
API rather than in the change's own transaction (docs/operations.md, "Audit log").

What the target is: the path's `job_id`, `task_id` and template `name`; the `path` query
parameter (upload); the paths and modes of a filesystem write's JSON body (`path`,
`target_path`, `link_path`, `mode`, `owner`, `group`; nothing else of a body is kept); and
the new job's or task's id from the answer. Never a token, a JobSpec or a file's content.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict
from typing import Any

import anyio.to_thread
from fastapi.routing import APIRoute
from starlette.datastructures import Headers, QueryParams
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from iri_gateway.api.plumbing import deps
from iri_gateway.api.plumbing.draining import CUT_BY_DRAIN
from iri_gateway.api.plumbing.reads import route_reads
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.operations.audit import AuditEntry, AuditLog, outcome_of
from iri_gateway.service.operations.request_context import request_id, trace_id

log = logging.getLogger(__name__)

READ_AUDIT = "getAudit"
"""The audit's own read: an admin's successful read is not recorded (a refused one is)."""
HELD_BYTES = 65536
"""The most of a request's JSON body, and of an answer, kept to find the target in."""
UNRECORDED_STATUSES = frozenset({401, 429})
BODY_FIELDS = ("path", "target_path", "link_path", "mode", "owner", "group")
PATH_FIELDS = (("job_id", "job"), ("task_id", "task"), ("name", "template"))
ANSWER_FIELDS = (("id", "job"), ("task_id", "task"))

_ADMIN_ONLY = "_iri_gateway_admin_only"


def _admin_only(route: APIRoute) -> bool:
    """True when the route takes `deps.get_admin` (worked out once per route, kept on it)."""
    known: bool | None = getattr(route, _ADMIN_ONLY, None)
    if known is None:
        known = deps.get_admin in set(deps.dependency_calls(route.dependant))
        setattr(route, _ADMIN_ONLY, known)
    return known


def audited(method: str, route: APIRoute) -> bool:
    """True when a call of `route` with `method` is recorded (see the module's docstring)."""
    if _admin_only(route):
        return True
    return not route_reads(route, method)


def _json(held: bytearray, complete: bool) -> dict[str, Any]:
    if not complete or not held:
        return {}
    try:
        document = json.loads(held)
    except (ValueError, UnicodeDecodeError):
        return {}
    return document if isinstance(document, dict) else {}


def _target(scope: Scope, body: dict[str, Any], answer: dict[str, Any]) -> str | None:
    """The call's target in words (`job 42; path /x`), from what the module names."""
    parts: list[str] = []
    params: dict[str, Any] = scope.get("path_params", {})
    parts += [f"{word} {params[key]}" for key, word in PATH_FIELDS if key in params]
    query = QueryParams(scope.get("query_string", b""))
    if "path" in query:
        parts.append(f"path {query['path']}")
    parts += [f"{key} {body[key]}" for key in BODY_FIELDS if isinstance(body.get(key), str | int)]
    parts += [
        f"{word} {answer[key]}"
        for key, word in ANSWER_FIELDS
        if isinstance(answer.get(key), str) and f"{word} {answer[key]}" not in parts
    ]
    return "; ".join(parts) or None


class _Call:
    """What the middleware learns of one audited call as it goes."""

    def __init__(self, scope: Scope) -> None:
        self.scope = scope
        self.json_body: bool | None = None
        """The request body is JSON (None: not looked at yet; only audited calls look)."""
        self.body = bytearray()
        self.body_complete = False
        self.answer = bytearray()
        self.answer_complete = False
        self.trace: str | None = trace_id()

    def take_body(self, message: Message) -> None:
        if self.json_body is None:
            kind = Headers(scope=self.scope).get("content-type", "")
            self.json_body = kind.startswith("application/json")
        if not self.json_body or message["type"] != "http.request":
            return
        if len(self.body) + len(message.get("body", b"")) > HELD_BYTES:
            self.json_body = False  # too long to be a filesystem write's: not looked into
            self.body.clear()
            return
        self.body += message.get("body", b"")
        self.body_complete = not message.get("more_body", False)

    def entry(self, principal: Principal, status: int, error: str | None) -> AuditEntry:
        route: APIRoute = self.scope["route"]
        answer = _json(self.answer, self.answer_complete)
        if status >= 400 and error is None:
            title = answer.get("title")
            error = title if isinstance(title, str) else None
        return AuditEntry(
            user=principal.user,
            admin=principal.admin,
            operation=route.operation_id or route.name,
            outcome=outcome_of(status),
            resource_id=self.scope.get("path_params", {}).get("resource_id"),
            target=_target(self.scope, _json(self.body, self.body_complete), answer),
            status=status,
            error=error,
            request_id=request_id(),
            trace_id=self.trace,
        )


class AuditTrail:
    """ASGI middleware: records each audited call in `audit` before its answer is sent."""

    def __init__(self, app: ASGIApp, *, audit: AuditLog) -> None:
        self.app = app
        self.audit = audit

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        call = _Call(scope)
        held: list[Message] = []
        status = 0
        recorded = False

        def wanted() -> bool:
            route = scope.get("route")
            return isinstance(route, APIRoute) and audited(scope["method"], route)

        async def reading() -> Message:
            message = await receive()
            if wanted():
                call.take_body(message)
            return message

        async def sending(message: Message) -> None:
            nonlocal status, recorded
            if recorded or not wanted():
                await send(message)
                return
            if message["type"] == "http.response.start":
                status = message["status"]
                call.trace = trace_id() or call.trace
                held.append(message)
                return
            if message["type"] == "http.response.body":
                call.answer += message.get("body", b"")
                held.append(message)
                more = message.get("more_body", False)
                call.answer_complete = not more
                if more and len(call.answer) <= HELD_BYTES:
                    return
                recorded = True
                await self._record(call, status, None)
                for each in held:
                    await send(each)
                held.clear()
                return
            await send(message)

        try:
            await self.app(scope, reading, sending)
        except Exception:
            if not recorded and wanted():
                recorded = True
                await self._record(call, status if status >= 500 else 500, "Internal Server Error")
            raise

    async def _record(self, call: _Call, status: int, error: str | None) -> None:
        principal: Principal | None = call.scope.get(deps.AUTHENTICATED)
        if principal is None or status in UNRECORDED_STATUSES:
            return
        entry = call.entry(principal, status, error)
        if entry.operation == READ_AUDIT and entry.outcome == "succeeded":
            return
        try:
            if call.scope.get(CUT_BY_DRAIN):
                # The drain's end cut this call (`draining.CutByDrain` answers it 503) and the
                # process is going: its worker threads are gone or going, and its loop
                # serves nothing else, so the record is written here, before the answer.
                self.audit.record(entry)
            else:
                await anyio.to_thread.run_sync(self.audit.record, entry)
        except Exception:
            log.exception("audit record lost: %s", json.dumps(asdict(entry), sort_keys=True))
