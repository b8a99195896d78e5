"""The IRI `filesystem` operations `ls`, `head`, `tail`, `view`, `stat`, and the task operations.

As in the official spec, each filesystem operation is a POST that answers with a
`TaskSubmitResponse`; the result is then read through `GET /api/v2/task/{task_id}`. The gateway
does the work before it answers, so the task is already `completed` (with its `result`) when the
caller first asks; a request that cannot be served is answered at once with problem+json.

Security: a path is served only when it lies inside the job directory (`directory` of the
effective JobSpec) of one of the caller's own jobs on that resource. The path is first checked
lexically (no file system access for anything else), then resolved on the resource with
`realpath` (symbolic links and `..` as the kernel sees them) and checked again, component by
component, against the resolved job directories; commands then run on the resolved path. A
path outside, another user's path and a missing path all get the same 404. Commands run through
the job's backend transport (the caller's mapped account over SSH, or locally), always as argv
lists: `realpath`, `stat`, `find`, `dd`. A relative path is taken relative to the resource's
job root, where jobs that name no `directory` get theirs (`<job id>/stdout.txt` is the output
of such a job).

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
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import Enum, StrEnum
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel, ConfigDict, Field

from iri_gateway.api.deps import EngineDep, PrincipalDep
from iri_gateway.api.problems import ApiProblem
from iri_gateway.auth import Principal
from iri_gateway.engine import Engine
from iri_gateway.models.jobspec import JsonInt
from iri_gateway.transport.base import CommandResult, Transport

router = APIRouter(prefix="/api/v2")

MAX_READ = 1024 * 1024
"""Most bytes of file content one operation returns."""
MAX_ENTRIES = 10_000
"""Most entries one `ls` returns."""
MAX_DEREFERENCE = 1_000
"""Most symbolic links one `ls` dereferences."""
DEFAULT_LINES = 10
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

    path: str = Field(description="The path to list", examples=["/home/user"])
    show_hidden: bool = Field(default=False, alias="showHidden", description="Show hidden files")
    numeric_uid: bool = Field(default=False, alias="numericUid",
                              description="List numeric user and group IDs")
    recursive: bool = Field(default=False, description="Recursively list files and folders")
    dereference: bool = Field(default=False,
                              description="Show information for the file the link references")


class PostHeadRequest(BaseModel):
    """Request body for the head endpoint."""

    model_config = ConfigDict(populate_by_name=True, strict=True)

    path: str = Field(description="File path", examples=["/home/user/file.txt"])
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

    path: str = Field(min_length=1, description="File path", examples=["/home/user/file.txt"])
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

    path: str = Field(description="File path", examples=["/home/user/file.txt"])
    # As in the official schema: minimum 1, default 0 (0, the default, means "up to the limit").
    size: JsonInt = Field(default=0, ge=1, description="Number of bytes to retrieve from the file")
    offset: JsonInt = Field(default=0, ge=0, description="Byte offset to start reading from")


class PostStatRequest(BaseModel):
    """Request body for the stat endpoint."""

    model_config = ConfigDict(strict=True)

    path: str = Field(description="A file or folder path", examples=["/home/user/file.txt"])
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


# ---- resolving a path ----------------------------------------------------------------------


@dataclass(frozen=True)
class Target:
    """An allowed path: resolved (`path`), its link itself (`link`) and where to run commands."""

    asked: str
    path: str
    link: str
    roots: tuple[str, ...]
    transport: Transport

    def inside(self, path: str) -> bool:
        return any(_within(path, root) for root in self.roots)


def _within(path: str, root: str) -> bool:
    """True when `path` is `root` or below it, component-wise (both normalised)."""
    if root == "/":
        return path.startswith("/")
    if root == ".":  # a relative directory naming the home directory itself
        return not posixpath.isabs(path) and path != ".." and not path.startswith("../")
    return path == root or path.startswith(root + "/")


def _not_found(resource_id: str, asked: str) -> ApiProblem:
    return ApiProblem(404, "Not Found", f"{asked!r} is not a file or directory in the job "
                      f"directories of your jobs on {resource_id!r}")


def _run(transport: Transport, argv: Sequence[str]) -> CommandResult:
    """Run a command; output that is not valid UTF-8 is decoded leniently, not refused.

    The local transport decodes strictly, so a read that cuts a multi-byte character (or a
    binary file) raises UnicodeDecodeError, which carries the raw output: decode that instead.
    """
    try:
        return transport.run(argv, idempotent=True)
    except UnicodeDecodeError as error:
        raw = error.object if isinstance(error.object, bytes) else bytes(error.object)
        return CommandResult(tuple(argv), 0, _lenient(raw), "")


def _lenient(raw: bytes) -> str:
    """UTF-8 text of a byte range that may start or end inside a character."""
    start = 0
    while start < min(3, len(raw)) and 0x80 <= raw[start] <= 0xBF:
        start += 1
    end = len(raw)
    for back in range(1, min(4, end - start) + 1):
        byte = raw[end - back]
        if byte >= 0xC0:  # a lead byte: is its sequence complete?
            need = 2 if byte < 0xE0 else 3 if byte < 0xF0 else 4
            if back < need:
                end -= back
            break
        if byte < 0x80:
            break
    return raw[start:end].decode("utf-8", "replace")


def _split0(text: str) -> list[str]:
    parts = text.split("\0")
    return parts[:-1] if parts and parts[-1] == "" else parts


def resolve(engine: Engine, principal: Principal, resource_id: str, asked: str) -> Target:
    """Check `asked` against the caller's job directories on the resource; 404 otherwise."""
    if "\0" in asked or not asked:
        raise ApiProblem(422, "Unprocessable Entity", "the path is not valid",
                         [{"name": "path", "reason": "must be a non-empty path without NUL"}])
    loaded = engine.registry.get(resource_id)
    backend = engine.backends.get(loaded, principal.user)
    transport = backend.transport
    path = asked if posixpath.isabs(asked) else posixpath.join(backend.work_root, asked)
    directories = sorted({
        str(record.effective_spec["directory"])
        for record in engine.store.find(owner=principal.user, resource_id=resource_id)
        if record.effective_spec.get("directory")
    })
    # Lexical pre-check: nothing is touched on the resource for a path outside every job
    # directory. Relative directories are relative to where commands run (the home directory
    # over SSH); they are compared with an absolute path only when needed.
    same = [d for d in directories if posixpath.isabs(d) == posixpath.isabs(path)]
    candidates = [d for d in same
                  if _within(posixpath.normpath(path), posixpath.normpath(d))]
    if not candidates and len(same) < len(directories):
        home = _run(transport, ["realpath", "-e", "-z", "--", "."])
        if home.ok and _split0(home.stdout):
            base = _split0(home.stdout)[0]
            absolute = posixpath.normpath(posixpath.join(base, path))
            candidates = [d for d in directories if d not in same and _within(
                absolute, posixpath.normpath(posixpath.join(base, d)))]
    if not candidates:
        raise _not_found(resource_id, asked)
    # Physical check: resolve symbolic links and `..` on the resource.
    stripped = path.rstrip("/") or "/"
    name = posixpath.basename(stripped)
    parent = posixpath.dirname(stripped) if name not in ("", ".", "..") else None
    argv = ["realpath", "-m", "-z", "--", path, *candidates] + ([parent] if parent else [])
    result = _run(transport, argv)
    resolved = _split0(result.stdout)
    if not result.ok or len(resolved) != len(argv) - 4:
        raise _not_found(resource_id, asked)
    real = resolved[0]
    roots = tuple(resolved[1: 1 + len(candidates)])
    link = posixpath.join(resolved[-1], name) if parent else real
    if not any(_within(real, root) for root in roots):
        raise _not_found(resource_id, asked)
    # The link itself lies outside only when it is a job directory that is a link: use its
    # target then (the link is only used by `stat` without `dereference`).
    if not any(_within(link, root) for root in roots):
        link = real
    return Target(asked, real, link, roots, transport)


# ---- reading -------------------------------------------------------------------------------


def _probe(resource_id: str, target: Target) -> int:
    """The size of a regular file; 404 when missing, 400 when not a regular file."""
    result = _run(target.transport, ["stat", "-L", "--printf", "%s %f", "--", target.path])
    try:
        if not result.ok:
            raise ValueError(result.stderr)
        size_text, mode_text = result.stdout.split()
        size, mode = int(size_text), int(mode_text, 16)
    except ValueError:
        raise _not_found(resource_id, target.asked) from None
    if not stat_mode.S_ISREG(mode):
        kind = "a directory" if stat_mode.S_ISDIR(mode) else "not a regular file"
        raise ApiProblem(400, "Bad Request", f"{target.asked!r} is {kind}",
                         [{"name": "path", "reason": f"is {kind}"}])
    return size


def _read(resource_id: str, target: Target, offset: int, length: int) -> str:
    """Up to `length` bytes from `offset` (dd, byte-exact)."""
    if length <= 0:
        return ""
    argv = ["dd", f"if={target.path}", "iflag=skip_bytes,count_bytes", f"skip={offset}",
            f"count={length}", "status=none"]
    result = _run(target.transport, argv)
    if not result.ok:
        raise _not_found(resource_id, target.asked)
    return result.stdout


def _nbytes(text: str) -> int:
    return len(text.encode("utf-8", "surrogatepass"))


def _content(kind: str, text: str, start: int, size: int, truncated: bool) -> dict[str, Any]:
    part = FileContent(content=text, content_type=kind, start_position=start,
                       end_position=start + _nbytes(text), file_size=size, truncated=truncated)
    return {"output": part.model_dump()}


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


def _lines(text: str) -> list[str]:
    """Lines as `head -n` counts them: each with its newline; a last unterminated one too."""
    parts = text.split("\n")
    lines = [part + "\n" for part in parts[:-1]]
    return [*lines, parts[-1]] if parts[-1] else lines


def _whole_lines(text: str, cut: bool) -> str:
    """A part the limit cut short ends with its last whole line (if it has one)."""
    if cut and "\n" in text and not text.endswith("\n"):
        return text[: text.rindex("\n") + 1]
    return text


def head_result(resource_id: str, target: Target, body: PostHeadRequest) -> dict[str, Any]:
    _count("bytes", body.bytes_)
    _count("lines", body.lines)
    _one_unit(body.bytes_, body.lines)
    if body.bytes_ is not None and not body.skip_trailing:
        _bounded_bytes("bytes", body.bytes_)
    size = _probe(resource_id, target)
    if body.bytes_ is not None:
        end = max(size - body.bytes_, 0) if body.skip_trailing else min(body.bytes_, size)
        length = min(end, MAX_READ)
        return _content("bytes", _read(resource_id, target, 0, length), 0, size, length < end)
    lines = DEFAULT_LINES if body.lines is None else body.lines
    if body.skip_trailing:
        return _head_without_last_lines(resource_id, target, size, lines)
    kept = _lines(_read(resource_id, target, 0, min(size, MAX_READ)))[:lines]
    complete = size <= MAX_READ or (len(kept) == lines and kept[-1].endswith("\n"))
    if not complete and len(kept) > 1 and not kept[-1].endswith("\n"):
        kept.pop()  # the window cut this line: only whole lines, unless there is just one
    return _content("lines", "".join(kept), 0, size, not complete)


def _head_without_last_lines(resource_id: str, target: Target, size: int,
                             lines: int) -> dict[str, Any]:
    """All but the last `lines` lines: the cut is found in the file's last MiB."""
    window = min(size, MAX_READ)
    kept = _lines(_read(resource_id, target, size - window, window))
    if lines == 0:
        cut = size
    elif len(kept) > lines or window == size:
        cut = size - _nbytes("".join(kept[max(len(kept) - lines, 0):]))
    else:
        raise ApiProblem(422, "Unprocessable Entity",
                         f"the last {lines} lines span more than {MAX_READ} bytes; use bytes",
                         [{"name": "lines", "reason": "too many lines for one read"}])
    length = min(cut, MAX_READ)
    text = _whole_lines(_read(resource_id, target, 0, length), length < cut)
    return _content("lines", text, 0, size, length < cut)


def tail_result(resource_id: str, target: Target, body: PostTailRequest) -> dict[str, Any]:
    _one_unit(body.bytes_, body.lines)
    if body.bytes_ is not None and not body.skip_heading:
        _bounded_bytes("bytes", body.bytes_)
    size = _probe(resource_id, target)
    if body.bytes_ is not None:
        start = min(body.bytes_, size) if body.skip_heading else max(size - body.bytes_, 0)
        length = min(size - start, MAX_READ)
        text = _read(resource_id, target, start, length)
        return _content("bytes", text, start, size, start + length < size)
    lines = DEFAULT_LINES if body.lines is None else body.lines
    if body.skip_heading:
        return _tail_without_first_lines(resource_id, target, size, lines)
    window = min(size, MAX_READ)
    kept = _lines(_read(resource_id, target, size - window, window))
    complete = len(kept) > lines or window == size
    # Without the whole file, the window's first line may be cut: only whole lines are
    # shown, unless there is just one.
    text = "".join(kept[-lines:] if complete else kept[1:] or kept)
    return _content("lines", text, size - _nbytes(text), size, not complete)


def _tail_without_first_lines(resource_id: str, target: Target, size: int,
                              lines: int) -> dict[str, Any]:
    """All but the first `lines` lines: the cut is found in the file's first MiB."""
    kept = _lines(_read(resource_id, target, 0, min(size, MAX_READ)))
    if len(kept) > lines or size <= MAX_READ:
        start = min(_nbytes("".join(kept[:lines])), size)
    else:
        raise ApiProblem(422, "Unprocessable Entity",
                         f"the first {lines} lines span more than {MAX_READ} bytes; use bytes",
                         [{"name": "lines", "reason": "too many lines for one read"}])
    length = min(size - start, MAX_READ)
    text = _whole_lines(_read(resource_id, target, start, length), start + length < size)
    return _content("lines", text, start, size, start + length < size)


def view_result(resource_id: str, target: Target, body: PostViewRequest) -> dict[str, Any]:
    wanted = body.size or MAX_READ
    _bounded_bytes("size", wanted)
    size = _probe(resource_id, target)
    start = min(body.offset, size)
    length = min(wanted, size - start)
    return _content("bytes", _read(resource_id, target, start, length), start, size, False)


_STAT_FORMAT = "%f %i %d %h %u %g %s %X %Z %Y"


def stat_result(resource_id: str, target: Target, body: PostStatRequest) -> dict[str, Any]:
    argv = ["stat", *(["-L"] if body.dereference else []), "--printf", _STAT_FORMAT, "--",
            target.path if body.dereference else target.link]
    result = _run(target.transport, argv)
    fields = result.stdout.split()
    if not result.ok or len(fields) != 10:
        raise _not_found(resource_id, target.asked)
    try:
        numbers = [int(fields[0], 16), *(int(field) for field in fields[1:])]
    except ValueError:
        raise _not_found(resource_id, target.asked) from None
    names = ("mode", "ino", "dev", "nlink", "uid", "gid", "size", "atime", "ctime", "mtime")
    info = FileStat.model_validate(dict(zip(names, numbers, strict=True)))
    return {"output": info.model_dump()}


# ---- listing -------------------------------------------------------------------------------

_FIND_FORMAT = "%p\\0%y\\0%M\\0%u\\0%g\\0%U\\0%G\\0%s\\0%T@\\0%l\\0%P\\0%f\\0"
_FIELDS = 12
_TYPES = {"f": "file", "d": "directory", "l": "symlink"}


@dataclass(frozen=True)
class _Found:
    path: str
    kind: str
    permissions: str
    user: str
    group: str
    uid: str
    gid: str
    size: str
    mtime: str
    link: str
    relative: str
    base: str

    def entry(self, numeric: bool, name: str | None = None) -> File:
        try:
            modified = datetime.fromtimestamp(float(self.mtime), UTC)
            stamp = modified.isoformat(timespec="seconds").replace("+00:00", "Z")
        except ValueError:
            stamp = self.mtime
        return File(
            name=name if name is not None else (self.relative or self.base),
            type=_TYPES.get(self.kind, "other"),
            link_target=self.link or None,
            user=self.uid if numeric else self.user,
            group=self.gid if numeric else self.group,
            permissions=self.permissions[1:],
            last_modified=stamp,
            size=self.size,
        )


def _find(target: Target, argv: list[str]) -> tuple[list[_Found], bool]:
    """Run a `find ... -printf` and parse its records; bool: did it succeed."""
    result = _run(target.transport, argv)
    fields = _split0(result.stdout)
    records = [_Found(*fields[i: i + _FIELDS])
               for i in range(0, len(fields) - _FIELDS + 1, _FIELDS)]
    return records, result.ok


def ls_result(resource_id: str, target: Target, body: PostLsRequest) -> dict[str, Any]:
    found, ok = _find(target, ["find", target.path, "-maxdepth", "0", "-printf", _FIND_FORMAT])
    if not ok or len(found) != 1:
        raise _not_found(resource_id, target.asked)
    if found[0].kind != "d":
        only = found[0].entry(body.numeric_uid, name=posixpath.basename(target.asked.rstrip("/")))
        return {"output": [only.model_dump()], "truncated": False}
    argv = ["find", target.path, "-mindepth", "1"]
    if not body.recursive:
        argv += ["-maxdepth", "1"]
    if not body.show_hidden:
        argv += ["-name", ".*", "-prune", "-o"]
    argv += ["-printf", _FIND_FORMAT]
    entries, _ = _find(target, argv)  # unreadable subfolders: list what could be read
    entries.sort(key=lambda f: f.relative)
    truncated = len(entries) > MAX_ENTRIES
    entries = entries[:MAX_ENTRIES]
    replaced = _dereferenced(target, entries) if body.dereference else {}
    files = []
    for found_entry in entries:
        shown = replaced.get(found_entry.path)
        if shown is None:
            files.append(found_entry.entry(body.numeric_uid))
        else:
            entry = shown.entry(body.numeric_uid, name=found_entry.relative)
            files.append(entry.model_copy(update={"link_target": found_entry.link}))
    return {"output": [f.model_dump() for f in files], "truncated": truncated}


def _dereferenced(target: Target, entries: list[_Found]) -> dict[str, _Found]:
    """What links point to, for links that stay inside the job directories."""
    links = [e.path for e in entries if e.kind == "l"][:MAX_DEREFERENCE]
    if not links:
        return {}
    result = _run(target.transport, ["realpath", "-m", "-z", "--", *links])
    resolved = _split0(result.stdout)
    if not result.ok or len(resolved) != len(links):
        return {}
    inside = {link: real for link, real in zip(links, resolved, strict=True)
              if target.inside(real)}
    if not inside:
        return {}
    found, _ = _find(target, ["find", *sorted(set(inside.values())), "-maxdepth", "0",
                              "-printf", _FIND_FORMAT])
    by_path = {f.path: f for f in found}
    return {link: by_path[real] for link, real in inside.items() if real in by_path}


# ---- routes --------------------------------------------------------------------------------

_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {"description": "Not Found (also any path outside the caller's job directories)"},
}


@router.post("/filesystem/ls/{resource_id}", operation_id="ls", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Ls", responses=_RESPONSES,
             response_description="Directory listed successfully")
def post_ls(resource_id: str, body: PostLsRequest, engine: EngineDep,
            principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """List the contents of the given directory (`ls`) asynchronously.

    The task's `result` is `{output: [File], truncated}`; entries are sorted by name, at most
    10000. With `dereference`, links that point inside the job directories show their target;
    the others are shown as links. `recursive` never follows links into directories.
    """
    target = resolve(engine, principal, resource_id, body.path)
    result = ls_result(resource_id, target, body)
    return _submit(request, principal, "ls", body.model_dump(by_alias=True), result)


@router.post("/filesystem/head/{resource_id}", operation_id="head", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Head", responses=_RESPONSES,
             response_description="Head operation finished successfully")
def post_head(resource_id: str, body: PostHeadRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """Output the first part of file/s (`head`).

    The task's `result` is `{output: FileContent}`: at most 1 MiB; 10 lines by default.
    """
    target = resolve(engine, principal, resource_id, body.path)
    result = head_result(resource_id, target, body)
    return _submit(request, principal, "head", body.model_dump(by_alias=True), result)


@router.post("/filesystem/view/{resource_id}", operation_id="view", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post View", responses=_RESPONSES,
             response_description="View operation finished successfully")
def post_view(resource_id: str, body: PostViewRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """View file content (up to max 1048576 bytes per request; page with `offset`)."""
    target = resolve(engine, principal, resource_id, body.path)
    result = view_result(resource_id, target, body)
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
    target = resolve(engine, principal, resource_id, body.path)
    result = tail_result(resource_id, target, body)
    return _submit(request, principal, "tail", body.model_dump(by_alias=True), result)


@router.post("/filesystem/stat/{resource_id}", operation_id="stat", tags=_FILESYSTEM,
             response_model=TaskSubmitResponse, summary="Post Stat", responses=_RESPONSES,
             response_description="Stat returned successfully")
def post_stat(resource_id: str, body: PostStatRequest, engine: EngineDep,
              principal: PrincipalDep, request: Request) -> TaskSubmitResponse:
    """Output the `stat` of a file; the task's `result` is `{output: FileStat}`."""
    target = resolve(engine, principal, resource_id, body.path)
    result = stat_result(resource_id, target, body)
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
