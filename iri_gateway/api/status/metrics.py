"""`GET /metrics`: every series in the Prometheus text format, for whom the operator says.

Access is the setting `metrics_access`, made into the route itself when the app is built,
so the OpenAPI document says what this server asks for: `admin` (a facility admin's bearer
token: 401 without one, 403 for anybody else), `token` (the scrape token of
`metrics_token_file`, compared in constant time: 401 otherwise), `open`, or `off` (no
route: 404 like any unknown path). The series carry no token and no secret; the only user
names in them are the bounded per-user task queue's (`operations.metrics_facts`).
"""

from __future__ import annotations

import hmac
from pathlib import Path
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import ADMIN_ONLY, get_admin
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.errors import GatewayError
from iri_gateway.service.operations.metrics import PrometheusMetrics
from iri_gateway.service.operations.settings import Settings

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The Prometheus text exposition format, version 0.0.4."""

_bearer = HTTPBearer(auto_error=False)


class MetricsTokenError(GatewayError):
    """The scrape token file cannot be used (at start: the server does not start)."""

    code = "metrics_token"


def read_token(path: Path) -> str:
    """The scrape token in `path` (its one line, without surrounding white space)."""
    try:
        token = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as error:
        raise MetricsTokenError(
            f"metrics_token_file {str(path)!r} cannot be read ({error}); metrics_access "
            "'token' needs a file holding the scrape token"
        ) from error
    if not token or any(c.isspace() for c in token):
        raise MetricsTokenError(
            f"metrics_token_file {str(path)!r} must hold one token on one line (no spaces), "
            "as Prometheus sends it from `authorization: credentials_file:`"
        )
    return token


def check_metrics_access(settings: Settings) -> None:
    """MetricsTokenError when `metrics_access` is `token` and its file cannot be used."""
    if settings.metrics_access == "token" and settings.metrics_token_file is not None:
        read_token(settings.metrics_token_file)


def _scrape_token(path: Path) -> Any:
    """The dependency that lets through the holder of the token in `path` only."""

    async def scrape_token(
        credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(_bearer)],
    ) -> None:
        try:
            expected = read_token(path)
        except MetricsTokenError as error:
            raise ApiProblem(503, "Service Unavailable", str(error)) from error
        given = credentials.credentials if credentials else ""
        if not hmac.compare_digest(given.encode(), expected.encode()):
            raise ApiProblem(
                401,
                "Unauthorized",
                "GET /metrics needs the scrape token (Authorization: Bearer TOKEN, the token "
                "in the server's metrics_token_file)",
                headers={"WWW-Authenticate": "Bearer"},
            )

    return scrape_token


def router(settings: Settings) -> APIRouter | None:
    """The `/metrics` route as `settings.metrics_access` says; None when it is `off`."""
    access = settings.metrics_access
    if access == "off":
        return None
    responses: dict[int | str, dict[str, Any]] = {
        200: {
            "description": "Every series, in the Prometheus text format 0.0.4",
            "content": {CONTENT_TYPE: {"schema": {"type": "string"}}},
        }
    }
    dependencies: list[Any] = []
    if access == "admin":
        dependencies = [Depends(get_admin)]
        responses[403] = ADMIN_ONLY
    elif access == "token":
        assert settings.metrics_token_file is not None  # the settings' own rule
        check_metrics_access(settings)  # unusable: the server does not start
        dependencies = [Depends(_scrape_token(settings.metrics_token_file))]
        responses[401] = {"description": "No scrape token, or not the one of the server"}
        responses[503] = {"description": "The server's scrape token file cannot be read"}
    made = APIRouter(tags=["operations", "extensions"], route_class=CallerFirstRoute)

    @made.get(
        "/metrics",
        operation_id="getMetrics",
        summary="Metrics for Prometheus",
        description="Requests, launches, scheduler commands, jobs by state, the poller, the "
        "submitter, task queues, SSH and database pools and replica heartbeats, in the "
        "Prometheus text format (docs/operations.md, Monitoring). Who may read it is the "
        f"server's `metrics_access` setting (here: `{access}`).",
        response_class=Response,
        responses=responses,
        dependencies=dependencies,
    )
    async def get_metrics(request: Request) -> Response:
        metrics: PrometheusMetrics = request.app.state.metrics
        body = await run_in_threadpool(metrics.exposition)
        return Response(body, media_type=CONTENT_TYPE)

    return made
