"""The SDK's exceptions: every error answer of the gateway as a typed exception.

Each carries the RFC 9457 problem fields the gateway sends (`status`, `title`, `detail`,
`invalid_params`, `type`, `instance`), so a program can react to the kind (`NotFound`,
`InvalidRequest`, ...) and a person reads the field names and reasons.
"""

from __future__ import annotations

from typing import Any

import httpx


class GatewayClientError(Exception):
    """An error answer (RFC 9457 problem) from the gateway, or no answer at all (status 0)."""

    def __init__(
        self,
        status: int,
        title: str,
        detail: str,
        invalid_params: list[dict[str, str]] | None = None,
        *,
        type: str = "about:blank",
        instance: str | None = None,
    ) -> None:
        self.status = status
        self.title = title
        self.detail = detail
        self.invalid_params = invalid_params or []
        self.type = type
        self.instance = instance
        super().__init__(str(self))

    def __str__(self) -> str:
        head = f"{self.status} {self.title}" if self.status else self.title
        lines = [f"{head}: {self.detail}" if self.detail else head]
        lines += [f"  {p.get('name', '?')}: {p.get('reason', '')}" for p in self.invalid_params]
        return "\n".join(lines)

    @classmethod
    def from_response(cls, response: httpx.Response) -> GatewayClientError:
        """The problem an error response carries, as the exception class for its status."""
        kind = error_class(response.status_code)
        title = response.reason_phrase or "Error"
        try:
            body = response.json()
        except ValueError:
            return kind(response.status_code, title, response.text.strip()[:500])
        if not isinstance(body, dict):
            return kind(response.status_code, title, str(body)[:500])
        return cls.from_problem(body, response.status_code, title)

    @classmethod
    def from_problem(
        cls, body: dict[str, Any], status: int, title: str = "Error"
    ) -> GatewayClientError:
        """The exception of a problem document (an error answer's body, or a refused item
        of a bulk launch), of the class for its status (`status` when it names none)."""
        kind = error_class(int(body.get("status") or status))
        params = body.get("invalid_params") or []
        return kind(
            int(body.get("status") or status),
            str(body.get("title") or title),
            str(body.get("detail") or ""),
            [
                {"name": str(p.get("name", "")), "reason": str(p.get("reason", ""))}
                for p in params
                if isinstance(p, dict)
            ],
            type=str(body.get("type") or "about:blank"),
            instance=body.get("instance"),
        )


class ConnectionFailed(GatewayClientError):
    """No answer: the gateway could not be reached, or the connection broke (status 0)."""


class InvalidRequest(GatewayClientError):
    """400/422: the request or JobSpec is invalid, or the job cannot run there;
    `invalid_params` names every field and reason."""


class Unauthorized(GatewayClientError):
    """401: no token, or one the gateway does not accept."""


class Forbidden(GatewayClientError):
    """403: the token is valid but may not do this (e.g. not a member of the project)."""


class NotFound(GatewayClientError):
    """404: no such resource or job (another user's jobs are not found either)."""


class Conflict(GatewayClientError):
    """409: e.g. the same Idempotency-Key is being used for another request right now."""


class Gone(GatewayClientError):
    """410: it existed and has ended, e.g. the ports of a job that finished."""


class TooManyRequests(GatewayClientError):
    """429: the caller's request rate is used up for now (the detail names the limit and
    when to try again); the client retried after `Retry-After` before giving up."""


class ServerError(GatewayClientError):
    """5xx: the gateway or the scheduler behind it failed; the detail keeps its words."""


_BY_STATUS: dict[int, type[GatewayClientError]] = {
    400: InvalidRequest,
    401: Unauthorized,
    403: Forbidden,
    404: NotFound,
    409: Conflict,
    410: Gone,
    422: InvalidRequest,
    429: TooManyRequests,
}


def error_class(status: int) -> type[GatewayClientError]:
    """The exception class for an HTTP status."""
    if status >= 500:
        return ServerError
    return _BY_STATUS.get(status, GatewayClientError)
