"""A small typed client for the gateway's REST API (synchronous, httpx).

    with GatewayClient("http://127.0.0.1:8000", token) as gateway:
        job = gateway.submit("local", {"executable": "/bin/echo", "arguments": ["hi"]},
                             project="proj1")
        job = gateway.wait("local", job.id, timeout=60)
        print(job.state, gateway.output("local", job.id))

The server comes from the argument, else `$IRI_GATEWAY_URL`, else http://127.0.0.1:8000; the
bearer token from the argument, else `$IRI_GATEWAY_TOKEN`. Every error answer becomes a
`GatewayClientError` carrying the problem+json fields (status, title, detail,
invalid_params); a connection failure is one too, with status 0.

Job output is read through the official filesystem operations (`tail`, `view`) on the job's
output file, whose path follows the gateway's rule: a job that names no `directory` runs in
`<job id>/` under the resource's job root (which relative filesystem paths are relative to),
writing `stdout.txt` and `stderr.txt`; a job with a `directory` writes `iri-<job id>.out` and
`.err` there unless it names its own files.
"""

from __future__ import annotations

import os
import posixpath
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal

import httpx

from iri_gateway.capabilities import Capabilities
from iri_gateway.models.job import JobState
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.plan import Plan
from iri_gateway.placement import Placement

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "IRI_GATEWAY_URL"
TOKEN_ENV = "IRI_GATEWAY_TOKEN"
API = "/api/v2"
READ_LIMIT = 1024 * 1024
"""Most bytes the gateway returns per filesystem read."""

Stream = Literal["stdout", "stderr"]
SpecLike = JobSpec | Mapping[str, Any]


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
        """The problem an error response carries (or what can be said about it)."""
        title = response.reason_phrase or "Error"
        try:
            body = response.json()
        except ValueError:
            return cls(response.status_code, title, response.text.strip()[:500])
        if not isinstance(body, dict):
            return cls(response.status_code, title, str(body)[:500])
        params = body.get("invalid_params") or []
        return cls(
            int(body.get("status") or response.status_code),
            str(body.get("title") or title),
            str(body.get("detail") or ""),
            [{"name": str(p.get("name", "")), "reason": str(p.get("reason", ""))}
             for p in params if isinstance(p, dict)],
            type=str(body.get("type") or "about:blank"),
            instance=body.get("instance"),
        )


@dataclass(frozen=True)
class JobInfo:
    """A job as the gateway reports it (the official `Job` with its `JobStatus`)."""

    id: str
    state: JobState
    message: str | None = None
    exit_code: int | None = None
    time: float | None = None
    meta_data: dict[str, Any] = field(default_factory=dict)
    job_spec: dict[str, Any] | None = None
    attributes: dict[str, Any] = field(default_factory=dict)

    @property
    def final(self) -> bool:
        return self.state.final

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> JobInfo:
        status = document.get("status") or {}
        return cls(
            id=str(document["id"]),
            state=JobState(status.get("state", "new")),
            message=status.get("message"),
            exit_code=status.get("exit_code"),
            time=status.get("time"),
            meta_data=dict(status.get("meta_data") or {}),
            job_spec=document.get("job_spec"),
            attributes=dict(document.get("attributes") or {}),
        )


@dataclass(frozen=True)
class FileContent:
    """Part of a file; positions are byte offsets in the file (end exclusive)."""

    content: str
    start_position: int
    end_position: int
    file_size: int
    truncated: bool = False

    @classmethod
    def from_result(cls, result: Mapping[str, Any]) -> FileContent:
        output = result.get("output") or {}
        return cls(
            content=str(output.get("content", "")),
            start_position=int(output.get("start_position", 0)),
            end_position=int(output.get("end_position", 0)),
            file_size=int(output.get("file_size", output.get("end_position", 0))),
            truncated=bool(output.get("truncated", False)),
        )


class WaitTimeout(TimeoutError):
    """The job was not final when the time ran out; `job` is what was seen last."""

    def __init__(self, job: JobInfo, timeout: float) -> None:
        super().__init__(f"job {job.id} is still {job.state.value} after {timeout:g} s")
        self.job = job


def output_path(job: JobInfo, stream: Stream = "stdout") -> str:
    """Where a job's stdout or stderr is, as the gateway's filesystem operations take it.

    Uses the paths in the status `meta_data` when the gateway gives them; otherwise applies
    the gateway's rule to the JobSpec (which needs `job.job_spec`).
    """
    given = job.meta_data.get(f"{stream}_path")
    spec = job.job_spec or {}
    directory = job.meta_data.get("directory") or spec.get("directory")
    if isinstance(given, str) and posixpath.isabs(given):
        return given
    if isinstance(given, str) and isinstance(directory, str):
        return posixpath.join(directory, given)
    name = spec.get(f"{stream}_path")
    if isinstance(name, str) and posixpath.isabs(name):
        return name
    if not directory:
        return posixpath.join(job.id, name or f"{stream}.txt")
    suffix = "out" if stream == "stdout" else "err"
    return posixpath.join(directory, name or f"iri-{job.id}.{suffix}")


class GatewayClient:
    """The gateway's compute, extension, filesystem and task operations."""

    def __init__(
        self,
        server: str | None = None,
        token: str | None = None,
        *,
        timeout: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.server = (server or os.environ.get(URL_ENV) or DEFAULT_URL).rstrip("/")
        token = token or os.environ.get(TOKEN_ENV)
        headers = {"Accept": "application/json, application/problem+json"}
        if token:
            headers["Authorization"] = f"Bearer {token}"
        self._http = httpx.Client(base_url=self.server, headers=headers, timeout=timeout,
                                  transport=transport)
        self._sleep = sleep
        self._clock = clock

    # ---- plumbing ---------------------------------------------------------------------------

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> GatewayClient:
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None,
                 trace: TracebackType | None) -> None:
        self.close()

    def _request(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        try:
            response = self._http.request(method, API + path, **kwargs)
        except httpx.TransportError as error:
            raise GatewayClientError(0, "No answer from the gateway",
                                     f"{self.server}: {error}") from None
        if response.status_code >= 400:
            raise GatewayClientError.from_response(response)
        return response

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        response = self._request(method, path, **kwargs)
        try:
            return response.json()
        except ValueError:
            raise GatewayClientError(response.status_code, "Not JSON",
                                     f"{method} {path} answered {response.text[:200]!r}") from None

    @staticmethod
    def _spec(spec: SpecLike) -> dict[str, Any]:
        if isinstance(spec, JobSpec):
            document: dict[str, Any] = spec.model_dump(mode="json", exclude_unset=True)
            return document
        return dict(spec)

    # ---- compute ----------------------------------------------------------------------------

    def submit(self, resource: str, spec: SpecLike, idempotency_key: str | None = None,
               project: str | None = None) -> JobInfo:
        """Submit a job (launchJob); a retry with the same key returns the first job."""
        headers = {}
        if idempotency_key:
            headers["Idempotency-Key"] = idempotency_key
        if project:
            headers["X-IRI-Facility-Project"] = project
        document = self._json("POST", f"/compute/job/{resource}", json=self._spec(spec),
                              headers=headers)
        return JobInfo.from_json(document)

    def status(self, resource: str, job_id: str, *, include_spec: bool = False) -> JobInfo:
        """A job's status (getJob)."""
        params = {"include_spec": "true"} if include_spec else None
        return JobInfo.from_json(
            self._json("GET", f"/compute/status/{resource}/{job_id}", params=params)
        )

    def jobs(self, resource: str, historical: bool = False) -> list[JobInfo]:
        """The caller's jobs on a resource (getJobs); finished ones too with `historical`."""
        params = {"historical": "true" if historical else "false"}
        documents = self._json("POST", f"/compute/status/{resource}", params=params)
        return [JobInfo.from_json(d) for d in documents]

    def cancel(self, resource: str, job_id: str) -> None:
        """Ask for the job to be canceled (cancelJob); `wait` sees it end."""
        self._request("DELETE", f"/compute/cancel/{resource}/{job_id}")

    def wait(
        self,
        resource: str,
        job_id: str,
        timeout: float | None = None,
        poll: float = 0.2,
        *,
        max_poll: float = 5.0,
        on_update: Callable[[JobInfo], None] | None = None,
    ) -> JobInfo:
        """Poll until the job is final (intervals grow from `poll` to `max_poll` seconds).

        `on_update` sees every status read. Raises WaitTimeout when `timeout` runs out.
        """
        deadline = None if timeout is None else self._clock() + timeout
        interval = poll
        while True:
            job = self.status(resource, job_id)
            if on_update is not None:
                on_update(job)
            if job.final:
                return job
            if deadline is not None:
                left = deadline - self._clock()
                if left <= 0:
                    raise WaitTimeout(job, timeout or 0.0)
                interval = min(interval, left)
            self._sleep(interval)
            interval = min(max(interval, poll) * 1.5, max_poll)

    def output(self, resource: str, job_id: str, stream: Stream = "stdout",
               tail: int | None = None) -> str:
        """A job's stdout or stderr: the last `tail` lines, or all of it (paged by 1 MiB)."""
        path = output_path(self.status(resource, job_id, include_spec=True), stream)
        if tail is not None:
            return self.tail(resource, path, lines=tail).content
        parts: list[str] = []
        offset = 0
        while True:
            part = self.view(resource, path, offset=offset, size=READ_LIMIT)
            parts.append(part.content)
            if part.end_position <= offset or part.end_position >= part.file_size:
                return "".join(parts)
            offset = part.end_position

    # ---- extensions -------------------------------------------------------------------------

    def plan(self, resource: str, spec: SpecLike) -> Plan:
        """Dry run: runtime, bindings and the exact batch script; 422 lists every problem."""
        return Plan.model_validate(
            self._json("POST", f"/compute/plan/{resource}", json=self._spec(spec))
        )

    def placement(self, spec: SpecLike) -> list[Placement]:
        """Every resource ranked (runnable first, best flavour first), reasons for the others."""
        ranked = self._json("POST", "/compute/placement", json=self._spec(spec))
        return [Placement.model_validate(entry) for entry in ranked]

    def capabilities(self, resource: str) -> Capabilities:
        """Runtimes, GPU and MPI bindings, mounts, extra options, hardware, limits."""
        return Capabilities.model_validate(
            self._json("GET", f"/compute/capabilities/{resource}")
        )

    # ---- filesystem and tasks -----------------------------------------------------------------

    def task_result(self, operation: str, resource: str, body: Mapping[str, Any],
                    timeout: float = 60.0) -> dict[str, Any]:
        """Run a task-based filesystem operation and return its task's `result`."""
        submitted = self._json("POST", f"/filesystem/{operation}/{resource}", json=dict(body))
        task_id = str(submitted["task_id"])
        deadline = self._clock() + timeout
        interval = 0.1
        while True:
            task = self._json("GET", f"/task/{task_id}")
            status = task.get("status")
            if status == "completed":
                result: dict[str, Any] = task.get("result") or {}
                return result
            if status in ("failed", "canceled"):
                raise GatewayClientError(500, f"Task {status}",
                                         f"{operation} task {task_id}: {task.get('result')}")
            if self._clock() >= deadline:
                raise GatewayClientError(504, "Task not finished",
                                         f"{operation} task {task_id} is still {status}")
            self._sleep(interval)
            interval = min(interval * 2, 2.0)

    def tail(self, resource: str, path: str, *, lines: int | None = None,
             nbytes: int | None = None) -> FileContent:
        """The end of a file (official `tail`): last `lines` lines or `nbytes` bytes."""
        body = {"path": path, "lines": lines, "bytes": nbytes}
        return FileContent.from_result(self.task_result("tail", resource, body))

    def head(self, resource: str, path: str, *, lines: int | None = None,
             nbytes: int | None = None) -> FileContent:
        """The start of a file (official `head`)."""
        body = {"path": path, "lines": lines, "bytes": nbytes}
        return FileContent.from_result(self.task_result("head", resource, body))

    def view(self, resource: str, path: str, *, offset: int = 0,
             size: int = READ_LIMIT) -> FileContent:
        """`size` bytes from `offset` (official `view`)."""
        body = {"path": path, "offset": offset, "size": size}
        return FileContent.from_result(self.task_result("view", resource, body))

    def ls(self, resource: str, path: str, *, recursive: bool = False,
           show_hidden: bool = False) -> list[dict[str, Any]]:
        """A directory's entries (official `ls`)."""
        body = {"path": path, "recursive": recursive, "showHidden": show_hidden}
        entries: list[dict[str, Any]] = self.task_result("ls", resource, body).get("output", [])
        return entries

    def stat(self, resource: str, path: str, *, dereference: bool = False) -> dict[str, Any]:
        """The `stat` of a file (official `stat`)."""
        body = {"path": path, "dereference": dereference}
        info: dict[str, Any] = self.task_result("stat", resource, body).get("output", {})
        return info
