"""The IRI `task` operations: read, list and delete (or cancel) the caller's tasks.

The filesystem operations answer with a task (`api/filesystem/`); the caller follows it here,
through any replica (tasks are kept in the store). The routes only: the schemas and the
reading, listing and deleting are in `models.py`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from fastapi import APIRouter, Request

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import PrincipalDep
from iri_gateway.api.tasks.models import Task, delete_task, read_task, read_tasks

router = APIRouter(prefix="/api/v2", route_class=CallerFirstRoute)

_TASK: list[str | Enum] = ["task"]

_NO_TASK: dict[int | str, dict[str, Any]] = {
    404: {
        "description": "Not Found: no such task of the caller's (another user's task, a "
        "finished one beyond the newest 32, or finished more than an hour ago)"
    },
}


@router.get(
    "/task/{task_id}",
    operation_id="getTask",
    tags=_TASK,
    response_model=Task,
    summary="Get Task",
    responses=_NO_TASK,
)
def get_task(task_id: str, principal: PrincipalDep, request: Request) -> Task:
    """Get a task (the caller's own; others' are not found), through any replica.

    `pending` until a worker takes it, `active` (with `result.progress`) while it runs, then
    `completed`, `failed` or `canceled`. A task whose gateway process died is `failed`.
    """
    return read_task(request, principal, task_id)


@router.get(
    "/task", operation_id="getTasks", tags=_TASK, response_model=list[Task], summary="Get Tasks"
)
def get_tasks(principal: PrincipalDep, request: Request) -> list[Task]:
    """The caller's tasks, oldest first: every unfinished one (at most 32) and the newest 32
    finished ones, each kept for an hour after it finished."""
    return read_tasks(request, principal)


@router.delete(
    "/task/{task_id}",
    operation_id="deleteTask",
    tags=_TASK,
    response_model=str,
    summary="Delete Task",
    responses=_NO_TASK,
)
def delete_task_route(task_id: str, principal: PrincipalDep, request: Request) -> str:
    """Forget a finished task; cancel a `pending` or `active` one (it stops between entries,
    removes what it had written, and reads `canceled`)."""
    return delete_task(request, principal, task_id)
