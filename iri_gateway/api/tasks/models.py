"""The IRI task operations' schemas, and the filesystem operations' tasks as the API shows
them (kept in the store: `iri_gateway.service.tasks.records`, run by `task_runner`).

The short operations answer with a task (`TaskSubmitResponse`) that is already `completed`:
the gateway does the work before it answers. The long ones (`cp`, `compress`, `extract`) are
checked and resolved first, then answered with a `pending` task that the replica's pool runs
(`background_task`); its `result` holds `{progress}` while `active`, `{output}` when
`completed`, `{error: problem}` when `failed`. The caller reads it through
`GET /api/v2/task/{task_id}` on any replica; another user's task is not found.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import StrEnum
from typing import Any

from fastapi import Request
from pydantic import BaseModel, Field

from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.errors import GatewayError
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.tasks.records import CANCELED, TaskLimitError, TaskRecord
from iri_gateway.service.tasks.runner import Progress, TaskFailedError, TaskRunner

# ---- official task schemas -----------------------------------------------------------------


class TaskStatus(StrEnum):
    """Represents the status of a task."""

    PENDING = "pending"
    ACTIVE = "active"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELED = "canceled"


class TaskCommand(BaseModel):
    """Represents a command to be executed as part of a task."""

    router: str = Field(description="Router name the task comes from")
    command: str = Field(description="Command to execute")
    args: dict[str, Any] = Field(description="Command arguments as key-value pairs")


class Task(BaseModel):
    """Represents a task in the system."""

    id: str = Field(description="Unique identifier of the task")
    status: TaskStatus = Field(default=TaskStatus.PENDING, description="Current status of the task")
    result: dict[str, Any] | None = Field(
        default=None,
        description="Result of the task execution: `{output: ...}` as the IRI reference "
        "implementation shapes it (FileContent, [File] or FileStat) when `completed`; "
        "`{progress: {entries_done, entries_total, bytes_done, bytes_total}}` while a long "
        "operation is `active`; `{error: {status, title, detail, invalid_params}}` (the "
        "problem the request would have been answered with) when `failed`; `{stopped}` "
        "when `canceled` (true once its work has stopped and removed what it wrote)",
    )
    command: TaskCommand | None = Field(
        default=None, description="Command associated with this task"
    )


class TaskSubmitResponse(BaseModel):
    """Response model for submitting a task."""

    task_id: str = Field(description="Identifier of the submitted task")
    task_uri: str = Field(description="Where the task can be read (getTask)")


# ---- the tasks, in the store ---------------------------------------------------------------


def _runner(request: Request) -> TaskRunner:
    engine: Engine = request.app.state.engine
    return engine.tasks


def task_view(record: TaskRecord) -> Task:
    """A stored task as the official `Task`."""
    return Task(
        id=record.id,
        status=TaskStatus(record.status),
        result=record.result,
        command=TaskCommand.model_validate(record.command),
    )


def _submitted(request: Request, record: TaskRecord) -> TaskSubmitResponse:
    uri = str(request.url_for("get_task", task_id=record.id))
    return TaskSubmitResponse(task_id=record.id, task_uri=uri)


def _command(command: str, args: dict[str, Any]) -> dict[str, Any]:
    return TaskCommand(router="filesystem", command=command, args=args).model_dump(mode="json")


def completed_task(
    request: Request,
    principal: Principal,
    command: str,
    args: dict[str, Any],
    result: dict[str, Any],
) -> TaskSubmitResponse:
    """Record a finished operation as the caller's completed task; where to read it."""
    record = _runner(request).record(principal.user, _command(command, args), result)
    return _submitted(request, record)


def problem_body(problem: ApiProblem) -> dict[str, Any]:
    """An HTTP problem as a failed task's `result.error` (what the request would have been
    answered with, had it run before the answer)."""
    body: dict[str, Any] = {
        "type": "about:blank",
        "status": problem.status,
        "title": problem.title,
        "detail": problem.detail,
    }
    if problem.invalid_params:
        body["invalid_params"] = problem.invalid_params
    return body


def background_task(
    request: Request,
    principal: Principal,
    command: str,
    args: dict[str, Any],
    work: Callable[[Progress], dict[str, Any]],
) -> TaskSubmitResponse:
    """`work` as the caller's new `pending` task, run by the replica's task pool; where to
    read it. An ApiProblem of the work becomes the task's `result.error`."""

    def run(progress: Progress) -> dict[str, Any]:
        try:
            return work(progress)
        except ApiProblem as problem:
            raise TaskFailedError(problem_body(problem)) from None

    try:
        record = _runner(request).submit(
            principal.user, _command(command, args), run, limit=_task_limit(request)
        )
    except TaskLimitError:
        raise  # 429 with Retry-After (`problems.quota_problem`)
    except GatewayError as error:
        raise ApiProblem(503, "Service Unavailable", str(error)) from None
    return _submitted(request, record)


def _task_limit(request: Request) -> int | None:
    """The resource's own `limits.tasks_per_user` (None: the gateway's setting)."""
    resource_id = request.path_params.get("resource_id")
    if resource_id is None:
        return None
    engine: Engine = request.app.state.engine
    return engine.resource(resource_id=resource_id).resource.limits.tasks_per_user


def task_not_found(task_id: str) -> ApiProblem:
    """The 404 for a task that is not the caller's, or no longer kept."""
    return ApiProblem(404, "Not Found", f"no task {task_id!r}")


def read_task(request: Request, principal: Principal, task_id: str) -> Task:
    """The caller's task (tasks of replicas that are gone marked failed first)."""
    record = _runner(request).get(principal.user, task_id)
    if record is None:
        raise task_not_found(task_id)
    return task_view(record)


def read_tasks(request: Request, principal: Principal) -> list[Task]:
    """The caller's tasks, oldest first."""
    return [task_view(record) for record in _runner(request).list(principal.user)]


def delete_task(request: Request, principal: Principal, task_id: str) -> str:
    """Forget the caller's finished task, or cancel an unfinished one; what was done."""
    done = _runner(request).delete(principal.user, task_id)
    if done is None:
        raise task_not_found(task_id)
    if done == CANCELED:
        return f"Task {task_id} canceled: it stops at its next step and reads `canceled`"
    return f"Task {task_id} deleted successfully"
