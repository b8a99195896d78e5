"""The one place where domain errors become RFC 9457 problem+json responses.

Each error class has a status code here; `invalid_params` lists the fields at fault, one
entry per problem (`{name, reason}`), as the IRI API does.
"""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from iri_gateway.auth import AuthenticationError
from iri_gateway.backends import NoAccountError
from iri_gateway.engine import (
    IdempotencyConflictError,
    JobNotChangeableError,
    JobNotFoundError,
    OutputUnavailableError,
)
from iri_gateway.errors import (
    CancelError,
    GatewayError,
    InvalidJobSpecError,
    JobRejectedError,
    ProfileError,
    SchedulerError,
    SubmitError,
    TemplateError,
    UnknownResourceError,
    UpdateError,
    json_path,
)
from iri_gateway.transport.base import TransportError

PROBLEM = "application/problem+json"
_STATUS: list[tuple[type[GatewayError], int, str]] = [
    (AuthenticationError, 401, "Unauthorized"),
    (UnknownResourceError, 404, "Not Found"),
    (JobNotFoundError, 404, "Not Found"),
    (OutputUnavailableError, 404, "Not Found"),
    (NoAccountError, 403, "Forbidden"),
    (IdempotencyConflictError, 422, "Unprocessable Entity"),
    (InvalidJobSpecError, 422, "Unprocessable Entity"),
    (JobRejectedError, 422, "Unprocessable Entity"),
    (JobNotChangeableError, 409, "Conflict"),
    (SubmitError, 422, "Unprocessable Entity"),
    (UpdateError, 409, "Conflict"),
    (CancelError, 409, "Conflict"),
    (SchedulerError, 502, "Bad Gateway"),
    (TransportError, 503, "Service Unavailable"),
    (TemplateError, 500, "Internal Server Error"),
    (ProfileError, 500, "Internal Server Error"),
]


class ApiProblem(Exception):
    """An HTTP-level problem raised by the API layer itself (e.g. a bad header)."""

    def __init__(self, status: int, title: str, detail: str,
                 invalid_params: list[dict[str, str]] | None = None) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail
        self.invalid_params = invalid_params or []


def problem(request: Request, status: int, title: str, detail: str,
            invalid_params: list[dict[str, str]] | None = None,
            headers: dict[str, str] | None = None) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank", "status": status, "title": title, "detail": detail,
        "instance": str(request.url),
    }
    if invalid_params:
        body["invalid_params"] = invalid_params
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


def _params(error: GatewayError) -> list[dict[str, str]]:
    problems = getattr(error, "problems", None)
    if not problems:
        return []
    return [{"name": p.field, "reason": str(p).split(": ", 1)[-1]} for p in problems]


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, error: GatewayError) -> JSONResponse:
        for kind, status, title in _STATUS:
            if isinstance(error, kind):
                headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
                return problem(request, status, title, str(error), _params(error), headers)
        return problem(request, 500, "Internal Server Error", str(error))

    @app.exception_handler(ApiProblem)
    async def api_problem(request: Request, error: ApiProblem) -> JSONResponse:
        return problem(request, error.status, error.title, error.detail, error.invalid_params)

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        params = []
        for detail in error.errors():
            loc = list(detail.get("loc", ()))
            if loc and loc[0] == "body":
                loc = loc[1:]
            reason = str(detail.get("msg", "invalid")).removeprefix("Value error, ")
            if detail.get("type") == "extra_forbidden":
                reason = "unknown field; the IRI JobSpec does not define it"
            params.append({"name": json_path(loc), "reason": reason})
        return problem(request, 422, "Unprocessable Entity", "the request is not valid", params)

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        return problem(request, error.status_code, str(error.detail), str(error.detail),
                       headers=getattr(error, "headers", None))
