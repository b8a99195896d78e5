"""Every gateway operation the SDK makes, described once for the sync and the async client.

A `Call` is the request (method, path, query, body, headers) and how to read the answer.
Every call here is safe to send again after a connection failure: reads, cancel (asking
twice is asking once), filesystem reads, and submissions, which carry an Idempotency-Key.
The two clients only differ in how they send a call, so the operations and their parsing
are written once, here.

A submission is safe to send again because it always carries an `Idempotency-Key` (the
caller's, else a fresh one): the gateway answers a repeat with the job the first one made.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, Generic, TypeVar

import httpx

from iri_gateway.client.errors import GatewayClientError, error_class
from iri_gateway.client.models import (
    DEFAULT_URL,
    TOKEN_ENV,
    URL_ENV,
    ElementPage,
    FileContent,
    JobInfo,
    JobPort,
    LaunchResult,
    PortLink,
)
from iri_gateway.models.job import JobState
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.models.job_templates import StoredTemplate, Template
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.placement import Placement
from iri_gateway.models.plan import Plan
from iri_gateway.profiles.capabilities import Capabilities

T = TypeVar("T")
SpecLike = JobSpec | Mapping[str, Any]
RETRY_STATUSES = frozenset({429, 502, 503, 504})
"""Answers from a proxy, a restarting gateway, a gateway whose scheduler or login node is
unavailable for now (503 with Retry-After), or one refusing the caller's request rate for
now (429 with Retry-After: the request was not acted on): a safe call retries."""
RETRY_AFTER_LIMIT = 60.0
"""The longest pause taken on a server's `Retry-After`, in seconds: a bound, so that a wrong
or hostile header cannot stall a program for hours."""


@dataclass(frozen=True)
class Call(Generic[T]):
    """One request and how to read its answer."""

    method: str
    path: str
    parse: Callable[[httpx.Response], T]
    params: dict[str, str] | None = None
    json: Any = None
    headers: dict[str, str] = field(default_factory=dict)


def client_settings(server: str | None, token: str | None) -> tuple[str, dict[str, str]]:
    """The server URL and request headers, from the arguments or the environment."""
    url = (server or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
    token = token or os.environ.get(TOKEN_ENV)
    headers = {"Accept": "application/json, application/problem+json"}
    if token:
        headers["Authorization"] = f"Bearer {token}"
    return url, headers


def backoff(attempt: int) -> float:
    """Seconds before retry number `attempt` (0-based): 0.5, 1, 2, 4, then 8 at most."""
    return float(min(0.5 * 2**attempt, 8.0))


def retry_pause(response: httpx.Response, attempt: int) -> float:
    """Seconds before retrying after `response`: its `Retry-After` (delay-seconds or an
    HTTP date, RFC 9110) when it has a usable one, at most RETRY_AFTER_LIMIT; the backoff
    otherwise."""
    header = response.headers.get("Retry-After", "").strip()
    seconds: float | None = None
    if header.isdigit():
        seconds = float(header)
    elif header:
        try:
            when = parsedate_to_datetime(header)
        except (TypeError, ValueError):
            when = None
        if when is not None and when.tzinfo is not None:
            seconds = max(0.0, (when - datetime.now(UTC)).total_seconds())
    if seconds is None:
        return backoff(attempt)
    return min(seconds, RETRY_AFTER_LIMIT)


def body_json(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        raise GatewayClientError(
            response.status_code,
            "Not JSON",
            f"{response.request.method} {response.request.url} answered {response.text[:200]!r}",
        ) from None


def spec_document(spec: SpecLike) -> dict[str, Any]:
    if isinstance(spec, JobSpec):
        document: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
        return document
    return dict(spec)


def _job(response: httpx.Response) -> JobInfo:
    return JobInfo.from_json(body_json(response))


def _nothing(response: httpx.Response) -> None:
    return None


def submit(
    resource: str, spec: SpecLike, idempotency_key: str | None, project: str | None
) -> Call[JobInfo]:
    headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
    if project:
        headers["X-IRI-Facility-Project"] = project
    return Call("POST", f"/compute/job/{resource}", _job, json=spec_document(spec), headers=headers)


def launch_jobs(
    resource: str, specs: Sequence[SpecLike], idempotency_key: str | None, project: str | None
) -> Call[list[LaunchResult]]:
    """A bulk launch carries an Idempotency-Key (the caller's, else a fresh one) like a
    single submission: sent again, it answers the jobs the first call made."""
    headers = {"Idempotency-Key": idempotency_key or str(uuid.uuid4())}
    if project:
        headers["X-IRI-Facility-Project"] = project
    return Call(
        "POST",
        f"/compute/jobs/{resource}",
        lambda r: [LaunchResult.from_json(item) for item in body_json(r)],
        json=[spec_document(spec) for spec in specs],
        headers=headers,
    )


def status(resource: str, job_id: str, include_spec: bool) -> Call[JobInfo]:
    params = {"include_spec": "true"} if include_spec else None
    return Call("GET", f"/compute/status/{resource}/{job_id}", _job, params=params)


def jobs(resource: str, historical: bool) -> Call[list[JobInfo]]:
    def parse(response: httpx.Response) -> list[JobInfo]:
        return [JobInfo.from_json(d) for d in body_json(response)]

    return Call(
        "POST",
        f"/compute/status/{resource}",
        parse,
        params={"historical": "true" if historical else "false"},
    )


def cancel(resource: str, job_id: str) -> Call[None]:
    return Call("DELETE", f"/compute/cancel/{resource}/{job_id}", _nothing)


def restart(resource: str, job_id: str) -> Call[JobInfo]:
    return Call("POST", f"/compute/restart/{resource}/{job_id}", _job)


def job_elements(
    resource: str, job_id: str, offset: int, limit: int, state: str | None
) -> Call[ElementPage]:
    params = {"offset": str(offset), "limit": str(limit)}
    if state is not None:
        params["state"] = JobState(state).value
    return Call(
        "GET",
        f"/compute/job/{resource}/{job_id}/elements",
        lambda r: ElementPage.from_json(body_json(r)),
        params=params,
    )


def cancel_elements(resource: str, job_id: str, indices: str | Sequence[int]) -> Call[None]:
    """Canceling an element twice is canceling it once: safe to send again."""
    written = indices if isinstance(indices, str) else ArrayIndices.parse(list(indices)).text()
    return Call(
        "DELETE",
        f"/compute/job/{resource}/{job_id}/elements",
        _nothing,
        params={"indices": written},
    )


def job_ports(resource: str, job_id: str) -> Call[list[JobPort]]:
    return Call(
        "GET",
        f"/compute/ports/{resource}/{job_id}",
        lambda r: [JobPort.from_json(entry) for entry in body_json(r)],
    )


def open_port(resource: str, job_id: str, member: str, port: str) -> Call[PortLink]:
    """A link is made anew on each call (a repeat only makes another), so this is safe to
    send again."""

    def parse(response: httpx.Response) -> PortLink:
        document = body_json(response)
        return PortLink(str(document["url"]), float(document["expires_at"]))

    return Call("POST", f"/compute/ports/{resource}/{job_id}/{member}/{port}", parse)


def tunnel_of(ports: list[JobPort], job_id: str, member: str, port: str) -> str:
    """The tunnel URL of one of a job's ports, as listJobPorts gave them; NotFound for a
    port the job did not declare, GatewayClientError when the gateway has no port proxy."""
    for entry in ports:
        if (entry.member, entry.name) == (member, port):
            if entry.tunnel is None:
                raise GatewayClientError(
                    501,
                    "Not Implemented",
                    "this gateway has no port proxy (its operator sets proxy_url)",
                )
            return entry.tunnel
    declared = ", ".join(f"{e.member}/{e.name}" for e in ports) or "none"
    raise error_class(404)(
        404,
        "Not Found",
        f"job {job_id} declares no port {port!r} on member {member!r} (it declares: {declared})",
    )


def bearer_token(headers: Mapping[str, str]) -> str | None:
    """The bearer token a client sends, for the connections it makes beside httpx."""
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.partition(" ")
    return token if scheme.lower() == "bearer" and token else None


def plan(resource: str, spec: SpecLike) -> Call[Plan]:
    return Call(
        "POST",
        f"/compute/plan/{resource}",
        lambda r: Plan.model_validate(body_json(r)),
        json=spec_document(spec),
    )


def placement(spec: SpecLike) -> Call[list[Placement]]:
    return Call(
        "POST",
        "/compute/placement",
        lambda r: [Placement.model_validate(e) for e in body_json(r)],
        json=spec_document(spec),
    )


TemplateLike = Template | Mapping[str, Any]
"""A job template: the model, or its JSON document (`kind`: task or cluster)."""


def templates() -> Call[list[StoredTemplate]]:
    return Call(
        "GET",
        "/compute/templates",
        lambda r: [StoredTemplate.model_validate(e) for e in body_json(r)],
    )


def template_get(name: str) -> Call[StoredTemplate]:
    return Call(
        "GET", f"/compute/templates/{name}", lambda r: StoredTemplate.model_validate(body_json(r))
    )


def template_put(name: str, template: TemplateLike) -> Call[StoredTemplate]:
    """Writing the same body again leaves the same template: safe to repeat."""
    document = (
        template
        if isinstance(template, Mapping)
        else template.model_dump(mode="json", exclude_unset=True)
    )
    return Call(
        "PUT",
        f"/compute/templates/{name}",
        lambda r: StoredTemplate.model_validate(body_json(r)),
        json=dict(document),
    )


def template_delete(name: str) -> Call[None]:
    """A repeat after a lost answer finds the template gone (404, the template is deleted)."""
    return Call("DELETE", f"/compute/templates/{name}", _nothing)


def audit(filters: Mapping[str, str | int | None]) -> Call[dict[str, Any]]:
    """A page of the audit log (facility admins): the filters given (`user`, `operation`,
    `since`, `until`, `offset`, `limit`), as the server's JSON page."""
    params = {name: str(value) for name, value in filters.items() if value is not None}
    return Call("GET", "/audit", body_json, params=params)


def capabilities(resource: str) -> Call[Capabilities]:
    return Call(
        "GET",
        f"/compute/capabilities/{resource}",
        lambda r: Capabilities.model_validate(body_json(r)),
    )


def task_submit(operation: str, resource: str, body: Mapping[str, Any]) -> Call[str]:
    """Start a filesystem task; reading tasks have no effect, so a repeat is harmless."""
    return Call(
        "POST",
        f"/filesystem/{operation}/{resource}",
        lambda r: str(body_json(r)["task_id"]),
        json=dict(body),
    )


def task_get(task_id: str) -> Call[dict[str, Any]]:
    def parse(response: httpx.Response) -> dict[str, Any]:
        task: dict[str, Any] = body_json(response)
        return task

    return Call("GET", f"/task/{task_id}", parse)


def task_outcome(operation: str, task_id: str, task: Mapping[str, Any]) -> dict[str, Any] | None:
    """A finished task's result; None while it runs; an error when it failed."""
    state = task.get("status")
    if state == "completed":
        result: dict[str, Any] = task.get("result") or {}
        return result
    if state in ("failed", "canceled"):
        raise GatewayClientError(
            500, f"Task {state}", f"{operation} task {task_id}: {task.get('result')}"
        )
    return None


def next_interval(interval: float, poll: float, max_poll: float) -> float:
    """Polling slows down by half each time, from `poll` up to `max_poll` seconds."""
    return min(max(interval, poll) * 1.5, max_poll)


def next_offset(part: FileContent, offset: int) -> int | None:
    """Where the next page of a file starts, or None when `part` reached its end."""
    if part.end_position <= offset or part.end_position >= part.file_size:
        return None
    return part.end_position
