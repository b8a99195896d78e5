"""The error responses of the OpenAPI document: every status the server can send, per operation.

FastAPI documents only what a route declares (and a 422 `HTTPValidationError` the server never
sends: `problems.py` answers a refused request with a Problem). `document_errors` decorates
the generated document in one place: which operation can send what is derived from the
route itself (a bearer token dependency can send 401, and 403 where the operation changes
something (a token that may only read, `x-iri-gateway-access`), the admin dependency 403, the engine
503 when the database or the login node is unavailable, a path parameter 404, any operation
422 (a query parameter it does not define, `deps.known_query`; its parameters or body), a body
400 and 413), plus a table of what some routes' bodies send beyond that (`_SENT_BY`). Every
error is documented as `application/problem+json` with the `Problem` schema, as `problems.py`
sends it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from fastapi.routing import APIRoute

from iri_gateway.api.plumbing import deps
from iri_gateway.api.plumbing.problems import PROBLEM
from iri_gateway.api.plumbing.reads import route_reads
from iri_gateway.api.sign_in.cookies import SAFE_METHODS

PROBLEM_REF = "#/components/schemas/Problem"

PROBLEM_SCHEMA: dict[str, Any] = {
    "title": "Problem",
    "description": 'An error, as RFC 9457 "Problem Details for HTTP APIs": the IRI API\'s '
    "`Problem` with `invalid_params` naming each field at fault; further members "
    "(extension members, RFC 9457 section 3.2) may be present.",
    "type": "object",
    "required": ["type", "status", "title", "detail", "instance"],
    "additionalProperties": True,
    "properties": {
        "type": {
            "type": "string",
            "format": "uri-reference",
            "default": "about:blank",
            "description": "A URI reference that identifies the problem type",
        },
        "status": {
            "type": "integer",
            "minimum": 100,
            "maximum": 599,
            "description": "The HTTP status code of this answer",
        },
        "title": {"type": "string", "description": "Short summary of the problem type"},
        "detail": {
            "type": "string",
            "description": "What went wrong with this request, and what is offered instead",
        },
        "instance": {"type": "string", "description": "The URL of the request"},
        "invalid_params": {
            "type": "array",
            "description": "Each field at fault, with the reason",
            "items": {
                "type": "object",
                "required": ["name", "reason"],
                "additionalProperties": False,
                "properties": {"name": {"type": "string"}, "reason": {"type": "string"}},
            },
        },
    },
}

LIMIT_MEMBERS: dict[str, Any] = {
    "type": "object",
    "description": "Which limit refused the request, and the caller's use of it",
    "properties": {
        "limit": {
            "type": "string",
            "description": "The limit's setting: `read_rate`, "
            "`write_rate`, `tasks_per_user` or `active_jobs_per_user`",
        },
        "limit_value": {
            "type": "number",
            "description": "Its value (requests per second for a rate; a count for a quota)",
        },
        "window_seconds": {"type": "number", "description": "A rate's sliding window"},
        "used": {
            "type": "number",
            "description": "The caller's use now (requests in the window, or what they hold)",
        },
        "retry_after": {
            "type": "integer",
            "description": "Seconds until one more request "
            "fits a rate, or a suggestion of when to look again for a quota "
            "(as the Retry-After header)",
        },
    },
}
"""The extension members of a refusal by a limit (`problems.py`)."""

_HEADER = {"schema": {"type": "string"}}
RETRY_AFTER = {**_HEADER, "description": "Seconds to wait before sending the request again"}

_DESCRIPTIONS: dict[int, str] = {
    400: "Bad Request: a body that cannot be parsed, or one that asks for something that "
    "cannot be (the fields at fault in `invalid_params`)",
    401: "Unauthorized: no bearer token, or one the gateway does not know (any more)",
    403: "Forbidden: the caller may not do this (a project the token does not grant, no "
    "account on the resource, a role the caller lacks, or a token that may only read on an "
    "operation that changes: `x-iri-gateway-access: write`); `detail` says how it is granted",
    404: "Not Found: nothing of that name the caller may see",
    409: "Conflict: the object's state does not allow this now",
    410: "Gone: it was there, and has ended for good",
    413: "Content Too Large: the body passes the server's `max_request_bytes`",
    422: "Unprocessable Entity: parameters or body refused, or a query parameter the "
    "operation does not define (`x-iri-gateway-unknown-query-parameters: refused`); "
    "`invalid_params` names each field at fault and why",
    429: "Too Many Requests: the caller's request rate is used up, or (`launchJob`, `cp`, "
    "`compress`, `extract`) the caller holds their quota already. `limit` names which: "
    "`read_rate` for requests that change nothing (GET, HEAD, and the POSTs that only look: "
    "`ls`, `stat`, `head`, `getJobs`, ...), `write_rate` for the rest, per user over every "
    "replica (`used` requests in the last `window_seconds`); `active_jobs_per_user` or "
    "`tasks_per_user` for a quota (`used`: what the caller holds; it frees when one ends or "
    "is canceled). Try again after `Retry-After` seconds (also `retry_after`; for a quota a "
    "suggestion). GET /account/limits shows the limits and their use",
    500: "Internal Server Error: a fault of the gateway, not of the request (its log has "
    "the details)",
    501: "Not Implemented: this gateway is not set up for it (`detail` names the setting)",
    502: "Bad Gateway: the scheduler failed on the command (its own words in `detail`)",
    503: "Service Unavailable: the database, the scheduler, the login node or the identity "
    "provider (asked whether a token is still active) cannot be reached now; try again after "
    "`Retry-After` seconds",
}

_RESOURCE_ACTIONS = (
    "launchJob",
    "updateJob",
    "cancelJob",
    "restartJob",
    "planJob",
    "ls",
    "head",
    "view",
    "tail",
    "stat",
)
"""Operations that act for the caller on a resource: a caller the profile maps to no account
there is refused with 403 (`NoAccountError`)."""

_SENT_BY: dict[int, tuple[str, ...]] = {
    400: ("launchJob", "updateJob", "ls", "head", "view", "tail", "stat", "getJobEvents"),
    403: _RESOURCE_ACTIONS,
    404: ("ls", "head", "view", "tail", "stat", "getJobEvents", "createSubscription"),
    409: (
        "updateJob",
        "cancelJob",
        "restartJob",
        "putJobTemplate",
        "deleteJobTemplate",
        "createSubscription",
        "openJobPort",
    ),
    410: ("openJobPort",),
    413: ("checkProfile",),
    429: ("checkProfile", "getJobEvents"),
    501: ("openJobPort",),
    502: ("launchJob", "updateJob", "cancelJob", "restartJob"),
    503: ("launchJob", "updateJob", "cancelJob", "restartJob", "getJobEvents"),
}
"""What route bodies send beyond what their dependencies and parameters say."""


ACCESS = "x-iri-gateway-access"
"""The extension naming the token class an operation needs: `read` (any token) or `write`
(a token that may change; a read token is refused 403)."""


def reads(route: APIRoute) -> bool:
    """True when every method of `route` changes nothing (`plumbing.reads`)."""
    return all(route_reads(route, method) for method in route.methods or ())


def safe_methods(route: APIRoute) -> bool:
    """True when every method of `route` is one a console session may use without its CSRF
    token."""
    return all(method in SAFE_METHODS for method in route.methods or ())


def statuses(route: APIRoute, operation: dict[str, Any]) -> set[int]:
    """The error statuses the server can send for one operation."""
    calls = set(deps.dependency_calls(route.dependant))
    operation_id = operation.get("operationId", "")
    sent = {500}
    if deps.get_principal in calls:
        # 429: the caller's request rate (`api.rate_limit`); 503: the identity provider
        # cannot say whether a JWT is still active (`introspection`, fail-closed)
        sent.update((401, 429, 503))
    if deps.get_admin in calls or (
        deps.get_principal in calls and (not reads(route) or not safe_methods(route))
    ):
        # a token that may only read, on an operation that changes; a console session's
        # request that is not a GET without its CSRF token (`sign_in.cookies`)
        sent.add(403)
    if deps.get_engine in calls:
        sent.add(503)
    parameters = operation.get("parameters", [])
    if any(p.get("in") == "path" for p in parameters):
        sent.add(404)
    sent.add(422)  # any operation: a query parameter it does not define (deps.known_query)
    if "requestBody" in operation:
        sent.update((400, 413))  # 400: a body that cannot be parsed at all
    sent.update(status for status, ids in _SENT_BY.items() if operation_id in ids)
    return sent


def _problem_response(status: int, declared: dict[str, Any] | None) -> dict[str, Any]:
    """The documented answer: the route's own description and extra members kept, the
    content the `Problem` (with the route's schema of extension members, if any)."""
    declared = dict(declared or {})
    schema: dict[str, Any] = {"$ref": PROBLEM_REF}
    own = declared.get("content", {}).get(PROBLEM, {}).get("schema")
    if own is None and status == 429:
        own = LIMIT_MEMBERS
    if own:
        schema = {"allOf": [schema, own]}
    answer: dict[str, Any] = {
        "description": declared.get("description") or _DESCRIPTIONS[status],
        "content": {PROBLEM: {"schema": schema}},
    }
    headers = dict(declared.get("headers", {}))
    if status == 401:
        headers["WWW-Authenticate"] = {**_HEADER, "description": "Bearer challenge"}
    if status in (429, 503):
        headers["Retry-After"] = RETRY_AFTER
    if headers:
        answer["headers"] = headers
    return answer


def _own_json(declared: dict[str, Any] | None) -> bool:
    """True when the route documents this status with a body of its own (not a Problem),
    e.g. the readiness report of `/ready`'s 503; FastAPI's `HTTPValidationError` is not."""
    schema = (declared or {}).get("content", {}).get("application/json", {}).get("schema")
    return schema is not None and schema.get("$ref") != "#/components/schemas/HTTPValidationError"


def document_errors(document: dict[str, Any], routes: Iterable[Any]) -> dict[str, Any]:
    """`document` with every operation's error responses, and the `Problem` schema.

    `routes` are the routes of the included routers; each is found in the document by its
    operationId (which FastAPI keeps unique), whatever the prefixes it was included with.
    """
    by_id = {
        route.operation_id or route.unique_id: route
        for route in routes
        if isinstance(route, APIRoute) and route.include_in_schema
    }
    for item in document["paths"].values():
        for operation in item.values():
            route = by_id.get(operation.get("operationId", ""))
            if route is None:
                continue
            if deps.get_principal in set(deps.dependency_calls(route.dependant)):
                operation[ACCESS] = "read" if reads(route) else "write"
            responses = operation.setdefault("responses", {})
            declared_errors = {int(s) for s in responses if s.isdigit() and int(s) >= 400}
            for status in sorted(statuses(route, operation) | declared_errors):
                declared = responses.get(str(status))
                if not _own_json(declared):
                    responses[str(status)] = _problem_response(status, declared)
            operation["responses"] = dict(sorted(responses.items()))
    schemas = document.setdefault("components", {}).setdefault("schemas", {})
    for unsent in ("HTTPValidationError", "ValidationError"):
        schemas.pop(unsent, None)
    schemas["Problem"] = PROBLEM_SCHEMA
    return document
