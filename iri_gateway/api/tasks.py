"""The IRI task operations' schemas and the task book: finished tasks per user, in memory.

The filesystem operations answer with a task (`TaskSubmitResponse`) that is already
`completed`: the gateway does the work before it answers, records the task here, and the
caller reads its `result` through `GET /api/v2/task/{task_id}`. The book is bounded in number
(per user) and age; another user's task is not found.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from fastapi import Request
from pydantic import BaseModel, Field

from iri_gateway.api.problems import ApiProblem
from iri_gateway.service.auth import Principal

TASKS_PER_USER = 32
"""Finished tasks kept per user (oldest dropped first)."""
TASK_TTL = 3600.0
"""Seconds a finished task stays readable."""


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
    status: TaskStatus = Field(default=TaskStatus.PENDING,
                               description="Current status of the task")
    result: dict[str, Any] | None = Field(
        default=None,
        description="Result of the task execution: `{output: ...}` as the IRI reference "
        "implementation shapes it (FileContent, [File] or FileStat)",
    )
    command: TaskCommand | None = Field(default=None,
                                        description="Command associated with this task")


class TaskSubmitResponse(BaseModel):
    """Response model for submitting a task."""

    task_id: str = Field(description="Identifier of the submitted task")
    task_uri: str = Field(description="Where the task can be read (getTask)")


# ---- the task book --------------------------------------------------------------------------


@dataclass
class _Entry:
    owner: str
    created: float
    task: Task


class TaskBook:
    """Finished tasks per user, in memory, bounded in number and age."""

    def __init__(self, per_user: int = TASKS_PER_USER, ttl: float = TASK_TTL) -> None:
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        self._per_user = per_user
        self._ttl = ttl
        self._lock = threading.Lock()

    def _expire(self, now: float) -> None:
        for task_id in [k for k, e in self._entries.items() if now - e.created > self._ttl]:
            del self._entries[task_id]

    def add(self, owner: str, task: Task) -> None:
        now = time.time()
        with self._lock:
            self._expire(now)
            self._entries[task.id] = _Entry(owner, now, task)
            mine = [k for k, e in self._entries.items() if e.owner == owner]
            for task_id in mine[: max(0, len(mine) - self._per_user)]:
                del self._entries[task_id]

    def get(self, owner: str, task_id: str) -> Task | None:
        with self._lock:
            self._expire(time.time())
            entry = self._entries.get(task_id)
            return entry.task if entry is not None and entry.owner == owner else None

    def list(self, owner: str) -> list[Task]:
        with self._lock:
            self._expire(time.time())
            return [e.task for e in self._entries.values() if e.owner == owner]

    def delete(self, owner: str, task_id: str) -> bool:
        with self._lock:
            entry = self._entries.get(task_id)
            if entry is None or entry.owner != owner:
                return False
            del self._entries[task_id]
            return True


_book_lock = threading.Lock()


def task_book(request: Request) -> TaskBook:
    """The application's task book (made on first use)."""
    with _book_lock:
        book: TaskBook | None = getattr(request.app.state, "filesystem_tasks", None)
        if book is None:
            book = TaskBook()
            request.app.state.filesystem_tasks = book
        return book


def task_not_found(task_id: str) -> ApiProblem:
    """The 404 for a task that is not the caller's, or no longer kept."""
    return ApiProblem(404, "Not Found", f"no task {task_id!r}")


def completed_task(request: Request, principal: Principal, command: str, args: dict[str, Any],
                   result: dict[str, Any]) -> TaskSubmitResponse:
    """Record a finished operation as the caller's completed task; where to read it."""
    task = Task(id=str(uuid.uuid4()), status=TaskStatus.COMPLETED, result=result,
                command=TaskCommand(router="filesystem", command=command, args=args))
    task_book(request).add(principal.user, task)
    uri = str(request.url_for("get_task", task_id=task.id))
    return TaskSubmitResponse(task_id=task.id, task_uri=uri)


