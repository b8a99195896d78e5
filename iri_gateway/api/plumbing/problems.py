"""The one place where domain errors become RFC 9457 problem+json responses.

Each error class has a status code here; `invalid_params` lists the fields at fault, one
entry per problem (`{name, reason}`), as the IRI API does.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from enum import StrEnum
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from sqlalchemy.exc import InterfaceError, OperationalError
from sqlalchemy.exc import TimeoutError as PoolTimeoutError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from iri_gateway.api.plumbing.body_limit import BodyTooLarge
from iri_gateway.api.plumbing.security_headers import HEADERS as PROTECTION
from iri_gateway.console.routes import AssetNotFound
from iri_gateway.errors import (
    CancelError,
    GatewayError,
    InvalidJobSpecError,
    JobRejectedError,
    ProfileError,
    RestartError,
    SchedulerError,
    SchedulerUnavailableError,
    SubmitError,
    TemplateError,
    UnknownResourceError,
    UpdateError,
    json_path,
)
from iri_gateway.service.accounts.auth import AuthenticationError
from iri_gateway.service.accounts.console_sessions import TooManyAttemptsError
from iri_gateway.service.accounts.introspection import IntrospectionUnavailableError
from iri_gateway.service.accounts.openid_sign_in import ProviderUnavailableError, SignInError
from iri_gateway.service.accounts.quotas import QuotaError
from iri_gateway.service.accounts.rate_limits import RateLimitError
from iri_gateway.service.accounts.token_policy import ReadOnlyTokenError
from iri_gateway.service.files.refusals import FileRefusedError, Refusal
from iri_gateway.service.jobs.engine import (
    IdempotencyConflictError,
    JobNotChangeableError,
    JobNotFoundError,
    NotArrayElementsError,
    OutputUnavailableError,
)
from iri_gateway.service.jobs.job_templates import (
    TemplateLimitError,
    TemplateNotFoundError,
    TemplateReadOnlyError,
)
from iri_gateway.service.operations.backends import NoAccountError
from iri_gateway.service.operations.database import DatabaseError, transient
from iri_gateway.service.proxy.errors import (
    PortClosedError,
    PortNotFoundError,
    PortNotOpenError,
    PortUnreachableError,
    ProxyLimitError,
    ProxyOffError,
)
from iri_gateway.service.proxy.passes import PassRefusedError
from iri_gateway.service.webhooks.destinations import (
    DestinationRefusedError,
    DestinationUnresolvedError,
)
from iri_gateway.service.webhooks.service import NotifySecretMissingError
from iri_gateway.service.webhooks.subscriptions import (
    SubscriptionLimitError,
    SubscriptionNotFoundError,
)
from iri_gateway.transport.base import TransportError

PROBLEM = "application/problem+json"
REQUEST_NOT_VALID = "the request is not valid"
"""`detail` of a request its parameters or body models refuse (FastAPI's validation)."""
_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")
_STATUS: list[tuple[type[GatewayError], int, str]] = [
    (AuthenticationError, 401, "Unauthorized"),
    (UnknownResourceError, 404, "Not Found"),
    (JobNotFoundError, 404, "Not Found"),
    (OutputUnavailableError, 404, "Not Found"),
    (TemplateNotFoundError, 404, "Not Found"),
    (TemplateReadOnlyError, 409, "Conflict"),
    (TemplateLimitError, 409, "Conflict"),
    (SubscriptionNotFoundError, 404, "Not Found"),
    (PortNotFoundError, 404, "Not Found"),
    (PortNotOpenError, 409, "Conflict"),
    (PortClosedError, 410, "Gone"),
    (ProxyOffError, 501, "Not Implemented"),
    (ProxyLimitError, 429, "Too Many Requests"),
    (PortUnreachableError, 502, "Bad Gateway"),
    (PassRefusedError, 401, "Unauthorized"),
    (SubscriptionLimitError, 409, "Conflict"),
    (DestinationRefusedError, 400, "Bad Request"),
    (NotifySecretMissingError, 400, "Bad Request"),
    (DestinationUnresolvedError, 503, "Service Unavailable"),
    (NoAccountError, 403, "Forbidden"),
    (ReadOnlyTokenError, 403, "Forbidden"),
    (IntrospectionUnavailableError, 503, "Service Unavailable"),
    (ProviderUnavailableError, 503, "Service Unavailable"),
    (TooManyAttemptsError, 503, "Service Unavailable"),
    (SignInError, 401, "Unauthorized"),
    (IdempotencyConflictError, 422, "Unprocessable Entity"),
    (InvalidJobSpecError, 422, "Unprocessable Entity"),
    (JobRejectedError, 422, "Unprocessable Entity"),
    (JobNotChangeableError, 409, "Conflict"),
    (NotArrayElementsError, 422, "Unprocessable Entity"),
    # Before the other scheduler errors: an outage is not the request's fault (not 4xx).
    (SchedulerUnavailableError, 503, "Service Unavailable"),
    (SubmitError, 422, "Unprocessable Entity"),
    (UpdateError, 409, "Conflict"),
    (CancelError, 409, "Conflict"),
    (RestartError, 409, "Conflict"),
    (SchedulerError, 502, "Bad Gateway"),
    (TransportError, 503, "Service Unavailable"),
    (DatabaseError, 503, "Service Unavailable"),
    (TemplateError, 500, "Internal Server Error"),
    (ProfileError, 500, "Internal Server Error"),
]


class ApiProblem(Exception):
    """An HTTP-level problem raised by the API layer itself (e.g. a bad header)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        invalid_params: list[dict[str, str]] | None = None,
        *,
        members: dict[str, Any] | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(detail)
        self.status, self.title, self.detail = status, title, detail
        self.invalid_params = invalid_params or []
        self.members = members or {}
        """Extension members of the problem (RFC 9457 section 3.2), e.g. located `errors`."""
        self.headers = headers


_FILE_STATUS: dict[Refusal, tuple[int, str]] = {
    Refusal.NOT_FOUND: (404, "Not Found"),
    Refusal.INVALID_PATH: (422, "Unprocessable Entity"),
    Refusal.UNKNOWN_NAME: (422, "Unprocessable Entity"),
    Refusal.WINDOW: (422, "Unprocessable Entity"),
    Refusal.SPECIAL_MODE: (422, "Unprocessable Entity"),
    Refusal.ROOT: (403, "Forbidden"),
    Refusal.RESERVED: (403, "Forbidden"),
    Refusal.DENIED: (403, "Forbidden"),
    Refusal.LINK_OUTSIDE: (403, "Forbidden"),
    Refusal.NOT_ALLOWED: (403, "Forbidden"),
    Refusal.EXISTS: (409, "Conflict"),
    Refusal.NOT_EMPTY: (409, "Conflict"),
    Refusal.CROSS_DEVICE: (409, "Conflict"),
    Refusal.CHANGED: (409, "Conflict"),
    Refusal.DIRECTORY: (400, "Bad Request"),
    Refusal.NOT_DIRECTORY: (400, "Bad Request"),
    Refusal.NOT_REGULAR: (400, "Bad Request"),
    Refusal.INVALID: (400, "Bad Request"),
    Refusal.BAD_MEMBER: (400, "Bad Request"),
    Refusal.NOT_ARCHIVE: (400, "Bad Request"),
    Refusal.TOO_LARGE: (413, "Content Too Large"),
    Refusal.LIMIT: (413, "Content Too Large"),
    Refusal.NO_FILE_COMMAND: (501, "Not Implemented"),
    Refusal.WRITE_FAILED: (500, "Internal Server Error"),
    Refusal.FAILED: (500, "Internal Server Error"),
    Refusal.CANCELED: (500, "Internal Server Error"),
}
"""The one table of file refusals: each kind's status and title, whatever operation met it."""


class FileOperation(StrEnum):
    """What the caller was doing when a file refusal came: each tells apart only the refusals
    it can meet (`_TOLD`) and words its details as its operations always have."""

    READ = "read"
    """`stat`, `ls`, `head`, `tail`, `view`, `checksum`'s look-ups: the reader's refusals."""
    TRANSFER = "transfer"
    """Uploads and downloads."""
    WRITE = "write"
    """Every change (and its task): every refusal, each as `{field} {path!r}: {reason}`."""


_TOLD: dict[FileOperation, frozenset[Refusal]] = {
    FileOperation.READ: frozenset(
        {
            Refusal.INVALID_PATH,
            Refusal.DIRECTORY,
            Refusal.NOT_REGULAR,
            Refusal.LIMIT,
            Refusal.WINDOW,
        }
    ),
    FileOperation.TRANSFER: frozenset(
        {
            Refusal.INVALID_PATH,
            Refusal.DIRECTORY,
            Refusal.NOT_REGULAR,
            Refusal.EXISTS,
            Refusal.DENIED,
            Refusal.WRITE_FAILED,
        }
    ),
    FileOperation.WRITE: frozenset(Refusal),
}
"""The refusals each operation tells apart; any other is its one 404, so that a read never
tells a reserved or changed file from a missing one."""
_REASONS = {
    Refusal.EXISTS: "already exists (nothing is overwritten)",
    Refusal.NOT_EMPTY: "is a folder that is not empty",
    Refusal.CROSS_DEVICE: "lies on another filesystem than `path`: copy, then remove",
    Refusal.NOT_REGULAR: "is not a regular file",
    Refusal.DIRECTORY: "is a directory",
}
"""A change's reason where its program gave no words."""
_PLACES = {
    FileOperation.READ: "file or directory you may read",
    FileOperation.TRANSFER: "file or folder you may use",
    FileOperation.WRITE: "file or directory you may use",
}


def file_problem(
    error: FileRefusedError,
    *,
    operation: FileOperation,
    resource_id: str,
    asked: Mapping[str, str],
) -> ApiProblem:
    """The HTTP problem of a file refusal, as a person can act on it: `asked` maps each
    request field to the path the caller gave (`path`, `target_path`, ...)."""
    kind = error.kind if error.kind in _TOLD[operation] else Refusal.NOT_FOUND
    status, title = _FILE_STATUS[kind]
    field = error.field or "path"
    path = asked.get("path", "")
    if kind is Refusal.NOT_FOUND:
        shown = asked.get(field, path)
        detail = (
            f"{shown!r} is not a {_PLACES[operation]} on {resource_id!r} (the folders of "
            "your jobs and the roots granted to you)"
        )
        named = [{"name": field, "reason": "not found"}]
        return ApiProblem(status, title, detail, named if operation is FileOperation.WRITE else [])
    if operation is not FileOperation.WRITE:
        return _told(error, kind, status, title, resource_id, path)
    reason = error.detail or _REASONS.get(kind, kind.value)
    if kind is Refusal.DENIED:
        reason = f"the operating system refused it to your account: {reason}"
    given = asked.get(field)
    detail = f"{field} {given!r}: {reason}" if given is not None else f"{field}: {reason}"
    return ApiProblem(status, title, detail, [{"name": field, "reason": reason}])


def _told(
    error: FileRefusedError, kind: Refusal, status: int, title: str, resource_id: str, path: str
) -> ApiProblem:
    """A read's or a transfer's refusal other than not found (`file_problem`)."""
    if kind is Refusal.INVALID_PATH:
        return ApiProblem(
            status, title, "the path is not valid", [{"name": "path", "reason": error.detail}]
        )
    if kind in (Refusal.DIRECTORY, Refusal.NOT_REGULAR):
        what = "a directory" if kind is Refusal.DIRECTORY else "not a regular file"
        return ApiProblem(
            status, title, f"{path!r} is {what}", [{"name": "path", "reason": f"is {what}"}]
        )
    if kind is Refusal.LIMIT:
        return ApiProblem(
            status, title, error.detail, [{"name": error.field or "path", "reason": error.detail}]
        )
    if kind is Refusal.WINDOW:
        return ApiProblem(
            status,
            title,
            error.detail,
            [{"name": error.field, "reason": "too many lines for one read"}],
        )
    if kind is Refusal.EXISTS:
        return ApiProblem(
            status,
            title,
            f"{path!r} exists already on {resource_id!r}; uploads never replace a file: "
            "remove it first or choose another name",
            [{"name": "path", "reason": "exists already"}],
        )
    if kind is Refusal.DENIED:
        return ApiProblem(
            status,
            title,
            f"the operating system does not let your account create {path!r} on "
            f"{resource_id!r}: {error.detail}",
        )
    return ApiProblem(
        status,
        title,
        f"{path!r} could not be written on {resource_id!r}: {error.detail}; nothing was left "
        "behind",
    )


def problem(
    request: Request,
    status: int,
    title: str,
    detail: str,
    invalid_params: list[dict[str, str]] | None = None,
    headers: dict[str, str] | None = None,
    members: dict[str, Any] | None = None,
) -> JSONResponse:
    body: dict[str, Any] = {
        "type": "about:blank",
        "status": status,
        "title": title,
        "detail": detail,
        "instance": str(request.url),
    }
    if invalid_params:
        body["invalid_params"] = invalid_params
    for name, value in (members or {}).items():
        body.setdefault(name, value)
    return JSONResponse(body, status_code=status, media_type=PROBLEM, headers=headers)


# Errors about one request field that carry no `problems` of their own.
_FIELD_AT_FAULT: list[tuple[type[GatewayError], str]] = [
    (IdempotencyConflictError, "Idempotency-Key"),
]


def _params(error: GatewayError) -> list[dict[str, str]]:
    problems = getattr(error, "problems", None)
    if problems:
        return [{"name": p.field, "reason": str(p).split(": ", 1)[-1]} for p in problems]
    for kind, field in _FIELD_AT_FAULT:
        if isinstance(error, kind):
            return [{"name": field, "reason": str(error)}]
    return []


def status_of(error: GatewayError) -> tuple[int, str, dict[str, str] | None]:
    """The status, title and headers of a gateway error's answer (500 for one this table
    does not know: a fault of the gateway)."""
    for kind, status, title in _STATUS:
        if isinstance(error, kind):
            headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
            if isinstance(
                error,
                SchedulerUnavailableError
                | TransportError
                | DatabaseError
                | DestinationUnresolvedError
                | IntrospectionUnavailableError
                | ProviderUnavailableError
                | TooManyAttemptsError,
            ):
                # Transient: the scheduler or the login node is unavailable for now; the
                # client may send the same request again after the pause (RFC 9110).
                headers = {"Retry-After": str(error.retry_after)}
            return status, title, headers
    return 500, "Internal Server Error", None


def install(app: FastAPI) -> None:
    """Register the handlers on `app`."""

    @app.exception_handler(GatewayError)
    async def gateway_error(request: Request, error: GatewayError) -> JSONResponse:
        status, title, headers = status_of(error)
        return problem(request, status, title, str(error), _params(error), headers)

    @app.exception_handler(RateLimitError)
    async def rate_limited(request: Request, error: RateLimitError) -> JSONResponse:
        return answer(request, as_problem(error))

    @app.exception_handler(QuotaError)
    async def over_quota(request: Request, error: QuotaError) -> JSONResponse:
        return quota_problem(request, error)

    @app.exception_handler(OperationalError)
    @app.exception_handler(InterfaceError)
    @app.exception_handler(PoolTimeoutError)
    async def database_fault(request: Request, error: Exception) -> JSONResponse:
        # The database was unreachable or busy past its time-outs: transient, not the
        # request's fault. (A refused constraint is a bug unless caught where it means
        # something: it stays a 500.)
        assert isinstance(error, OperationalError | InterfaceError | PoolTimeoutError)
        return await gateway_error(request, transient(error))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, error: Exception) -> JSONResponse:
        # A bug: still a problem document, so clients parse one kind of error. The server
        # logs the traceback (Starlette raises the error on after this answer is sent).
        # Sent from outside every middleware (Starlette's last resort), so with the
        # protection headers `SecurityHeaders` gives every other answer.
        return problem(
            request,
            500,
            "Internal Server Error",
            f"the gateway failed on this request ({type(error).__name__}); its log "
            "has the details. This is a fault of the gateway, not of the request",
            headers=PROTECTION,
        )

    @app.exception_handler(ApiProblem)
    async def api_problem(request: Request, error: ApiProblem) -> JSONResponse:
        return problem(
            request,
            error.status,
            error.title,
            error.detail,
            error.invalid_params,
            error.headers,
            error.members,
        )

    @app.exception_handler(AssetNotFound)
    async def no_such_asset(request: Request, error: AssetNotFound) -> JSONResponse:
        return problem(request, 404, "Not Found", str(error))

    @app.exception_handler(RequestValidationError)
    async def invalid_request(request: Request, error: RequestValidationError) -> JSONResponse:
        params = validation_params(error.errors())
        return problem(request, 422, "Unprocessable Entity", REQUEST_NOT_VALID, params)

    @app.exception_handler(BodyTooLarge)
    async def body_too_large(request: Request, error: BodyTooLarge) -> JSONResponse:
        return problem(
            request,
            413,
            "Content Too Large",
            str(error.detail),
            [{"name": "(body)", "reason": f"at most {error.limit} bytes"}],
        )

    @app.exception_handler(StarletteHTTPException)
    async def http_error(request: Request, error: StarletteHTTPException) -> JSONResponse:
        headers = dict(getattr(error, "headers", None) or {})
        if error.status_code == 405:
            # Starlette names only the methods of the first route matching the path; RFC 9110
            # wants every method the resource supports (e.g. GET and DELETE of /task/{id}).
            headers["Allow"] = ", ".join(allowed_methods(request))
        return problem(
            request,
            error.status_code,
            str(error.detail),
            str(error.detail),
            headers=headers or None,
        )


def quota_problem(request: Request, error: QuotaError) -> JSONResponse:
    """A quota's refusal: 429 with `Retry-After` (a suggestion: it frees when one of the
    caller's jobs or tasks ends), naming the limit, its value and the caller's use."""
    return answer(request, as_problem(error))


def answer(request: Request, refusal: ApiProblem) -> JSONResponse:
    """The problem+json answer of `refusal` to `request`."""
    return problem(
        request,
        refusal.status,
        refusal.title,
        refusal.detail,
        refusal.invalid_params,
        refusal.headers,
        refusal.members,
    )


def as_problem(error: GatewayError | ApiProblem) -> ApiProblem:
    """The problem an error is answered with (status, title, detail, `invalid_params`,
    extension members, headers), as the handlers above send it: for an answer that carries
    several (a bulk launch's refused items, `api.compute.bulk`) and for the handlers."""
    if isinstance(error, ApiProblem):
        return error
    if isinstance(error, RateLimitError):
        limit: dict[str, Any] = {"limit_value": error.rate, "window_seconds": error.window}
        return _past_limit(error, error.limit, error.retry_after, round(error.used, 1), limit)
    if isinstance(error, QuotaError):
        limit = {"limit_value": error.limit_value}
        return _past_limit(error, error.limit, error.retry_after, error.used, limit)
    status, title, headers = status_of(error)
    return ApiProblem(status, title, str(error), _params(error), headers=headers)


def _past_limit(
    error: GatewayError, name: str, retry_after: int, used: float, value: dict[str, Any]
) -> ApiProblem:
    """A refusal by a rate or a quota: 429 with `Retry-After`, naming the limit (`name`,
    then `value`: its value, a rate's window), the caller's use and when to ask again."""
    return ApiProblem(
        429,
        "Too Many Requests",
        str(error),
        headers={"Retry-After": str(retry_after)},
        members={"limit": name, **value, "used": used, "retry_after": retry_after},
    )


def validation_params(
    errors: Sequence[Any], at: tuple[int | str, ...] = ()
) -> list[dict[str, str]]:
    """`invalid_params` of pydantic's (or FastAPI's) validation errors, each field named as a
    JSON path below `at` (`[3].resources.node_count` for a bulk launch's fourth spec)."""
    params = []
    for detail in errors:
        loc = list(detail.get("loc", ()))
        if loc and loc[0] == "body":
            loc = loc[1:]
        reason = str(detail.get("msg", "invalid")).removeprefix("Value error, ")
        if detail.get("type") == "extra_forbidden":
            # Any request body (a JobSpec, a template, a profile check), not only a JobSpec
            reason = "unknown field; this request's schema does not define it"
        params.append({"name": json_path([*at, *loc]), "reason": reason})
    return params


def allowed_methods(request: Request) -> list[str]:
    """Every method some route of the application serves at the request's path; HEAD
    wherever GET is (`head.HeadAsGet`)."""
    served = {
        method
        for method in _METHODS
        if any(
            route.matches({**request.scope, "method": method})[0] == Match.FULL
            for route in request.app.router.routes
        )
    }
    if "GET" in served:
        served.add("HEAD")
    return [method for method in _METHODS if method in served]
