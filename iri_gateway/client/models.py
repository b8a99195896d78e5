"""What the SDK hands back: jobs, file contents, and the rules for where a job's output is.

Shared by the synchronous and the asynchronous client (`iri_gateway.client`).
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from iri_gateway.models.job import JobState

if TYPE_CHECKING:
    from iri_gateway.client.errors import GatewayClientError

DEFAULT_URL = "http://127.0.0.1:8000"
URL_ENV = "IRI_GATEWAY_URL"
TOKEN_ENV = "IRI_GATEWAY_TOKEN"
API = "/api/v2"
READ_LIMIT = 1024 * 1024
"""Most bytes the gateway returns per filesystem read."""

Stream = Literal["stdout", "stderr"]


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
class LaunchResult:
    """One spec's result of a bulk launch (launchJobs), in the order the specs were sent: its
    job, or why the gateway refused it (`error`, the problem as the exception launchJob
    would have raised; a spec the scheduler refused has both)."""

    index: int
    status: int
    """201 made now, 200 made by an earlier call with the same key, else the refusal's."""
    job: JobInfo | None = None
    error: GatewayClientError | None = None

    @property
    def ok(self) -> bool:
        """Whether the spec has its job (made now, or by an earlier call)."""
        return self.error is None and self.job is not None

    @property
    def replayed(self) -> bool:
        """Whether an earlier call with the same Idempotency-Key made the job."""
        return self.ok and self.status == 200

    def refusal(self) -> GatewayClientError | None:
        """The refusal as `submit` of this spec alone would raise it: its fields named
        without the list's `[i].` (`resources.node_count`); None for a job made."""
        error = self.error
        if error is None:
            return None
        named = [
            {"name": re.sub(r"^\[\d+\]\.?", "", p["name"]) or "(document)", "reason": p["reason"]}
            for p in error.invalid_params
        ]
        return type(error)(
            error.status, error.title, error.detail, named, type=error.type, instance=error.instance
        )

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> LaunchResult:
        from iri_gateway.client.errors import GatewayClientError  # httpx: not at import

        job, problem = document.get("job"), document.get("problem")
        status = int(document["status"])
        return cls(
            index=int(document["index"]),
            status=status,
            job=JobInfo.from_json(job) if isinstance(job, Mapping) else None,
            error=GatewayClientError.from_problem(dict(problem), status)
            if isinstance(problem, Mapping)
            else None,
        )


@dataclass(frozen=True)
class ArrayElement:
    """One element of an array job (listJobElements)."""

    index: int
    state: JobState
    native_state: str
    exit_code: int | None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ArrayElement:
        code = document.get("exit_code")
        return cls(
            index=int(document["index"]),
            state=JobState(document["state"]),
            native_state=str(document.get("native_state", "")),
            exit_code=code if isinstance(code, int) else None,
        )


@dataclass(frozen=True)
class ElementPage:
    """A page of an array job's elements, and how many there are (those in the state
    asked for, when one was)."""

    total: int
    offset: int
    elements: list[ArrayElement]

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> ElementPage:
        return cls(
            total=int(document["total"]),
            offset=int(document["offset"]),
            elements=[ArrayElement.from_json(e) for e in document.get("elements") or []],
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


@dataclass(frozen=True)
class JobPort:
    """One service port a job declared (listJobPorts): `url` and `tunnel` are where the
    gateway's port proxy serves it (None: the gateway has no port proxy)."""

    member: str
    name: str
    port: int
    url: str | None = None
    tunnel: str | None = None

    @classmethod
    def from_json(cls, document: Mapping[str, Any]) -> JobPort:
        return cls(
            member=str(document["member"]),
            name=str(document["name"]),
            port=int(document["port"]),
            url=document.get("url"),
            tunnel=document.get("tunnel"),
        )


@dataclass(frozen=True)
class PortLink:
    """A link that opens a port in a browser (openJobPort), valid until `expires_at`
    (seconds since the epoch) and once."""

    url: str
    expires_at: float


class WaitTimeout(TimeoutError):
    """The job was not final when the time ran out; `job` is what was seen last."""

    def __init__(self, job: JobInfo, timeout: float) -> None:
        super().__init__(f"job {job.id} is still {job.state.value} after {timeout:g} s")
        self.job = job


ARRAY_INDEX = "%a"
"""Where an array element's index goes in its output paths (the gateway's `INDEX_PATTERN`)."""


def output_path(job: JobInfo, stream: Stream = "stdout", element: int | None = None) -> str:
    """Where a job's stdout or stderr is, as the gateway's filesystem operations take it.

    Uses the paths in the status `meta_data` when the gateway gives them; otherwise applies
    the gateway's rule to the JobSpec (which needs `job.job_spec`). An array's elements each
    write their own: `element` is the index put for `%a` (ValueError without one).
    """
    path = _output_path(job, stream)
    if "array" not in job.meta_data or ARRAY_INDEX not in path:
        return path
    if element is None:
        raise ValueError(
            f"job {job.id} is an array: each element writes its own {stream} ({path}); "
            "say which element"
        )
    return path.replace(ARRAY_INDEX, str(element))


def _output_path(job: JobInfo, stream: Stream) -> str:
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
