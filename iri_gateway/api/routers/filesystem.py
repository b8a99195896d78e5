"""The IRI `filesystem` operations `ls`, `head`, `tail`, `view`, `stat`, and the task operations.

As in the official spec, each filesystem operation is a POST that answers with a
`TaskSubmitResponse`; the result is then read through `GET /api/v2/task/{task_id}`. The gateway
does the work before it answers, so the task is already `completed` (with its `result`) when the
caller first asks; a request that cannot be served is answered at once with problem+json.

Security: what a caller may read is decided by `iri_gateway.service.files` (the folders the gateway
made for the caller's jobs on that resource, and the roots the resource's profile grants the
caller), lexically first, then by the no-follow reader, which opens every component without
following links out and reads from what it opened: over SSH on the login node as the
caller's mapped account, locally in-process. A path outside, another user's path and a
missing path all get the same 404. A relative path is taken relative to the resource's job
root, where jobs that name no `directory` get theirs (`<job id>/stdout.txt` is the output of
such a job). `path` is at most 4096 bytes, without NUL (422 naming `path` otherwise).

Reads are bounded: at most 1 MiB of content per operation (`MAX_READ`), at most
`MAX_ENTRIES` entries per listing. Positions in results are byte offsets in the file.
"""

from __future__ import annotations

import posixpath
import stat as stat_mode
import threading
import time
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.api.deps import EngineDep, PrincipalDep
from iri_gateway.api.problems import ApiProblem
from iri_gateway.models.jobspec import JsonInt
from iri_gateway.service.auth import Principal
from iri_gateway.service.engine import Engine
from iri_gateway.service.files.access import FileRefusedError, decode_part

router = APIRouter(prefix="/api/v2")

MAX_READ = 1024 * 1024
"""Most bytes of file content one operation returns."""
MAX_ENTRIES = 10_000
"""Most entries one `ls` returns."""
MAX_DEREFERENCE = 1_000
"""Most symbolic links one `ls` dereferences."""
PATH_MAX = 4096
"""Longest `path`, in UTF-8 bytes (Linux PATH_MAX); the models bound its characters too."""
TASKS_PER_USER = 32
"""Finished tasks kept per user (oldest dropped first)."""
TASK_TTL = 3600.0
"""Seconds a finished task stays readable."""

_FILESYSTEM: list[str | Enum] = ["filesystem"]
_TASK: list[str | Enum] = ["task"]


# ---- official request bodies ---------------------------------------------------------------
# Strict, like the official JSON Schema: "1" is not a byte count and "yes" not a boolean.


class PostLsRequest(BaseModel):
    """Request body for the ls endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(max_length=PATH_MAX, description="The path to list",
                      examples=["/home/user"])
    show_hidden: bool = Field(default=False, alias="showHidden", description="Show hidden files")
    numeric_uid: bool = Field(default=False, alias="numericUid",
                              description="List numeric user and group IDs")
    recursive: bool = Field(default=False, description="Recursively list files and folders")
    dereference: bool = Field(default=False,
                              description="Show information for the file the link references")


class PostHeadRequest(BaseModel):
    """Request body for the head endpoint."""

    model_config = ConfigDict(populate_by_name=True, strict=True)

    path: str = Field(max_length=PATH_MAX, description="File path",
                      examples=["/home/user/file.txt"])
    bytes_: JsonInt | None = Field(default=None, alias="bytes",
                               description="Return the first NUM bytes of the file")
    lines: JsonInt | None = Field(default=None,
                                  description="Return the first NUM lines of the file")
    skip_trailing: bool = Field(default=False, alias="skipTrailing",
                                description="Return the whole file without the last NUM "
                                "bytes/lines")


class PostTailRequest(BaseModel):
    """Request body for the tail endpoint."""

    model_config = ConfigDict(populate_by_name=True, strict=True)

    path: str = Field(min_length=1, max_length=PATH_MAX, description="File path",
                      examples=["/home/user/file.txt"])
    bytes_: JsonInt | None = Field(default=None, ge=1, alias="bytes",
                               description="Return the last NUM bytes of the file")
    lines: JsonInt | None = Field(default=None, ge=1,
                                  description="Return the last NUM lines of the file")
    skip_heading: bool = Field(default=False, alias="skipHeading",
                               description="Return the whole file without the first NUM "
                               "bytes/lines")


class PostViewRequest(BaseModel):
    """Request body for the view endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(max_length=PATH_MAX, description="File path",
                      examples=["/home/user/file.txt"])
    # As in the official schema: minimum 1, default 0 (0, the default, means "up to the limit").
    size: JsonInt = Field(default=0, ge=1, description="Number of bytes to retrieve from the file")
    offset: JsonInt = Field(default=0, ge=0, description="Byte offset to start reading from")


class PostStatRequest(BaseModel):
    """Request body for the stat endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(max_length=PATH_MAX, description="A file or folder path",
                      examples=["/home/user/file.txt"])
    dereference: bool = Field(default=False, description="Follow symbolic links")


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


# ---- result shapes (inside Task.result["output"]) ------------------------------------------


class FileContent(BaseModel):
    """Part of a file; positions are byte offsets (end exclusive)."""

    content: str
    content_type: str = Field(description="'bytes' or 'lines': how the part was chosen")
    start_position: int
    end_position: int
    file_size: int = Field(description="Size of the file when it was read")
    truncated: bool = Field(description="True when the limit cut the answer short")


class File(BaseModel):
    """One entry of a listing."""

    name: str
    type: str = Field(description="'file', 'directory', 'symlink' or 'other'")
    link_target: str | None = None
    user: str
    group: str
    permissions: str
    last_modified: str
    size: str


class FileStat(BaseModel):
    """The `stat` of a file."""

    mode: int
    ino: int
    dev: int
    nlink: int
    uid: int
    gid: int
    size: int
    atime: int
    ctime: int
    mtime: int


# ---- tasks ---------------------------------------------------------------------------------


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


def _task_not_found(task_id: str) -> ApiProblem:
    return ApiProblem(404, "Not Found", f"no task {task_id!r}")


def _submit(request: Request, principal: Principal, command: str, args: dict[str, Any],
            result: dict[str, Any]) -> TaskSubmitResponse:
    task = Task(id=str(uuid.uuid4()), status=TaskStatus.COMPLETED, result=result,
                command=TaskCommand(router="filesystem", command=command, args=args))
    task_book(request).add(principal.user, task)
    uri = str(request.url_for("get_task", task_id=task.id))
    return TaskSubmitResponse(task_id=task.id, task_uri=uri)


# ---- reading through the confined reader ---------------------------------------------------

def _invalid_path(reason: str) -> ApiProblem:
    return ApiProblem(422, "Unprocessable Entity", "the path is not valid",
                      [{"name": "path", "reason": reason}])


def _checked(path: str) -> str:
    """The path, when it can name a file at all: 422 naming `path` otherwise."""
    if not path:
        raise _invalid_path("must be a non-empty path")
    if "\0" in path:
        raise _invalid_path("must not contain NUL")
    try:
        size = len(path.encode("utf-8"))
    except UnicodeEncodeError:
        raise _invalid_path("must be valid Unicode (no lone surrogates)") from None
    if size > PATH_MAX:
        raise _invalid_path(f"must be at most {PATH_MAX} bytes (UTF-8); it is {size}")
    return path


def _not_found(resource_id: str, asked: str) -> ApiProblem:
    return ApiProblem(404, "Not Found", f"{asked!r} is not a file or directory you may read "
                      f"on {resource_id!r} (the folders of your jobs and the roots granted "
                      "to you)")


def _read(engine: Engine, principal: Principal, resource_id: str, asked: str, operation: str,
          **arguments: Any) -> dict[str, Any]:
    """The reader's result for `operation` on the caller's path; problems as HTTP answers."""
    files = engine.files(owner=principal.user, resource_id=resource_id)
    try:
        return files.request(_checked(asked), operation, **arguments)
    except FileRefusedError as error:
        if error.kind in ("directory", "not_regular"):
            kind = "a directory" if error.kind == "directory" else "not a regular file"
            raise ApiProblem(400, "Bad Request", f"{asked!r} is {kind}",
                             [{"name": "path", "reason": f"is {kind}"}]) from None
        if error.kind == "window":
            raise ApiProblem(422, "Unprocessable Entity", error.detail,
                             [{"name": error.field, "reason": "too many lines for one read"}]
                             ) from None
        raise _not_found(resource_id, asked) from None


def _content(result: dict[str, Any]) -> dict[str, Any]:
    part = decode_part(result)
    content = FileContent(content=part.text, content_type=part.kind,
                          start_position=part.start, end_position=part.end,
                          file_size=part.size, truncated=part.truncated)
    return {"output": content.model_dump()}


def _count(name: str, value: int | None) -> None:
    if value is not None and value < 0:
        raise ApiProblem(422, "Unprocessable Entity", f"{name} must not be negative",
                         [{"name": name, "reason": "must be 0 or more"}])


def _bounded_bytes(name: str, value: int) -> None:
    if value > MAX_READ:
        raise ApiProblem(422, "Unprocessable Entity",
                         f"at most {MAX_READ} bytes can be read at once; use view to page",
                         [{"name": name, "reason": f"must be at most {MAX_READ}"}])


def _one_unit(nbytes: int | None, lines: int | None) -> None:
    if nbytes is not None and lines is not None:
        raise ApiProblem(422, "Unprocessable Entity", "give bytes or lines, not both",
                         [{"name": "bytes", "reason": "lines is given too"}])


def head_result(engine: Engine, principal: Principal, resource_id: str,
                body: PostHeadRequest) -> dict[str, Any]:
    _count("bytes", body.bytes_)
    _count("lines", body.lines)
    _one_unit(body.bytes_, body.lines)
    if body.bytes_ is not None and not body.skip_trailing:
        _bounded_bytes("bytes", body.bytes_)
    return _content(_read(engine, principal, resource_id, body.path, "head",
                          bytes=body.bytes_, lines=body.lines, skip=body.skip_trailing,
                          limit=MAX_READ))


def tail_result(engine: Engine, principal: Principal, resource_id: str,
                body: PostTailRequest) -> dict[str, Any]:
    _one_unit(body.bytes_, body.lines)
    if body.bytes_ is not None and not body.skip_heading:
        _bounded_bytes("bytes", body.bytes_)
    return _content(_read(engine, principal, resource_id, body.path, "tail",
                          bytes=body.bytes_, lines=body.lines, skip=body.skip_heading,
                          limit=MAX_READ))


def view_result(engine: Engine, principal: Principal, resource_id: str,
                body: PostViewRequest) -> dict[str, Any]:
    wanted = body.size or MAX_READ
    _bounded_bytes("size", wanted)
    return _content(_read(engine, principal, resource_id, body.path, "view",
                          offset=body.offset, size=wanted))


def stat_result(engine: Engine, principal: Principal, resource_id: str,
                body: PostStatRequest) -> dict[str, Any]:
    found = _read(engine, principal, resource_id, body.path, "stat",
                  dereference=body.dereference)
    return {"output": FileStat.model_validate(found).model_dump()}


def _file(entry: dict[str, Any], numeric: bool, name: str | None = None) -> File:
    modified = datetime.fromtimestamp(float(entry["mtime"]), UTC)
    return File(
        name=name if name is not None else str(entry["name"]),
        type=str(entry["kind"]),
        link_target=entry["link"] or None,
        user=str(entry["uid"]) if numeric else str(entry["user"]),
        group=str(entry["gid"]) if numeric else str(entry["group"]),
        permissions=stat_mode.filemode(int(entry["mode"]))[1:],
        last_modified=modified.isoformat(timespec="seconds").replace("+00:00", "Z"),
        size=str(entry["size"]),
    )


def ls_result(engine: Engine, principal: Principal, resource_id: str,
              body: PostLsRequest) -> dict[str, Any]:
    found = _read(engine, principal, resource_id, body.path, "ls",
                  recursive=body.recursive, hidden=body.show_hidden,
                  dereference=body.dereference, max_entries=MAX_ENTRIES,
                  max_dereference=MAX_DEREFERENCE)
    if not found["folder"]:
        name = posixpath.basename(body.path.rstrip("/"))
        only = _file(found["entries"][0], body.numeric_uid, name=name)
        return {"output": [only.model_dump()], "truncated": False}
    files = [_file(entry, body.numeric_uid) for entry in found["entries"]]
    return {"output": [f.model_dump() for f in files], "truncated": bool(found["truncated"])}


# ---- routes --------------------------------------------------------------------------------

_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "Not Found (also any path the caller may not read: outside the "
          "folders of the caller's jobs and the roots granted to the caller)"},
}


@router.post("/filesystem/ls/{resource_id}", operation_id="ls", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Ls", responses=_RESPONSES,
             response_description="Directory listed successfully")
def post_ls(resource_id: str, body: PostLsRequest, engine: EngineDep,
            principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """List the contents of the given directory (`ls`) asynchronously.

    The task's `result` is `{output: [File], truncated}`; entries are sorted by name, at most
    10000. With `dereference`, links that point inside the folder read from (the job folder or
    granted root) show their target; the others are shown as links. `recursive` never
    follows links into directories.
    """
    result = ls_result(engine, principal, resource_id, body)
    return _submit(request, principal, "ls", body.model_dump(by_alias=True), result)


@router.post("/filesystem/head/{resource_id}", operation_id="head", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Head", responses=_RESPONSES,
             response_description="Head operation finished successfully")
def post_head(resource_id: str, body: PostHeadRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """Output the first part of file/s (`head`).

    The task's `result` is `{output: FileContent}`: at most 1 MiB; 10 lines by default.
    """
    result = head_result(engine, principal, resource_id, body)
    return _submit(request, principal, "head", body.model_dump(by_alias=True), result)


@router.post("/filesystem/view/{resource_id}", operation_id="view", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post View", responses=_RESPONSES,
             response_description="View operation finished successfully")
def post_view(resource_id: str, body: PostViewRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """View file content (up to max 1048576 bytes per request; page with `offset`)."""
    result = view_result(engine, principal, resource_id, body)
    return _submit(request, principal, "view", body.model_dump(by_alias=True), result)


@router.post("/filesystem/tail/{resource_id}", operation_id="tail", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Tail", responses=_RESPONSES,
             response_description="`tail` operation finished successfully")
def post_tail(resource_id: str, body: PostTailRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """Output the last part of a file (`tail`).

    The task's `result` is `{output: FileContent}`: at most 1 MiB; 10 lines by default;
    `skipHeading` leaves out exactly the first NUM bytes or lines.
    """
    result = tail_result(engine, principal, resource_id, body)
    return _submit(request, principal, "tail", body.model_dump(by_alias=True), result)


@router.post("/filesystem/stat/{resource_id}", operation_id="stat", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Stat", responses=_RESPONSES,
             response_description="Stat returned successfully")
def post_stat(resource_id: str, body: PostStatRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """Output the `stat` of a file; the task's `result` is `{output: FileStat}`."""
    result = stat_result(engine, principal, resource_id, body)
    return _submit(request, principal, "stat", body.model_dump(by_alias=True), result)


@router.get("/task/{task_id}", operation_id="getTask", tags=_TASK, response_model=Task,
            summary="Get Task")
async def get_task(task_id: str, principal: PrincipalDep, request: Request) -> Task:
    """Get a task (the caller's own; others' are not found)."""
    task = task_book(request).get(principal.user, task_id)
    if task is None:
        raise _task_not_found(task_id)
    return task


@router.get("/task", operation_id="getTasks", tags=_TASK, response_model=list[Task],
            summary="Get Tasks")
async def get_tasks(principal: PrincipalDep, request: Request) -> list[Task]:
    """The caller's tasks, oldest first (finished tasks are kept for an hour, 32 per user)."""
    return task_book(request).list(principal.user)


@router.delete("/task/{task_id}", operation_id="deleteTask", tags=_TASK, response_model=str,
               summary="Delete Task")
async def delete_task(task_id: str, principal: PrincipalDep, request: Request) -> str:
    """Forget a task."""
    if not task_book(request).delete(principal.user, task_id):
        raise _task_not_found(task_id)
    return f"Task {task_id} deleted successfully"
