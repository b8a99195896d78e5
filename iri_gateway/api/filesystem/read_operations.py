"""The filesystem operations `ls`, `head`, `tail`, `view`, `stat`: each one's request checked,
read through the service (`Engine.files`), and its result shaped; refusals as HTTP problems.

What a caller may read is decided by `iri_gateway.service.files` alone (the folders the
gateway made for the caller's jobs on that resource, and the roots the resource's profile
grants the caller), lexically first, then by the no-follow reader: over SSH on the login node
as the caller's mapped account, locally in-process. A path outside, another user's path and a
missing path all get the same 404. A relative path is taken relative to the resource's job
root, where jobs that name no `directory` get theirs (`<job id>/stdout.txt` is the output of
such a job). `path` is at most 4096 bytes, without NUL (422 naming `path` otherwise).

Reads are bounded: at most 1 MiB of content per operation (`MAX_READ`), at most
`MAX_ENTRIES` entries per listing. Positions in results are byte offsets in the file.
"""

from __future__ import annotations

import posixpath
import stat as stat_mode
from datetime import UTC, datetime
from typing import Any

from iri_gateway.api.filesystem.read_models import (
    File,
    FileContent,
    FileStat,
    PostHeadRequest,
    PostLsRequest,
    PostStatRequest,
    PostTailRequest,
    PostViewRequest,
)
from iri_gateway.api.plumbing.problems import ApiProblem, FileOperation, file_problem
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.files.reads import decode_part
from iri_gateway.service.files.refusals import FileRefusedError
from iri_gateway.service.jobs.engine import Engine

MAX_READ = 1024 * 1024
"""Most bytes of file content one operation returns."""
MAX_ENTRIES = 10_000
"""Most entries one `ls` returns."""
MAX_DEREFERENCE = 1_000
"""Most symbolic links one `ls` dereferences."""


def _read(
    engine: Engine,
    principal: Principal,
    resource_id: str,
    asked: str,
    operation: str,
    **arguments: Any,
) -> dict[str, Any]:
    """The reader's result for `operation` on the caller's path; problems as HTTP answers."""
    files = engine.files(owner=principal.user, resource_id=resource_id, claims=principal.claims)
    try:
        return files.request(asked, operation, **arguments)
    except FileRefusedError as error:
        raise file_problem(
            error, operation=FileOperation.READ, resource_id=resource_id, asked={"path": asked}
        ) from None


def _content(result: dict[str, Any]) -> dict[str, Any]:
    """A read part as the official `FileContent` result."""
    part = decode_part(result)
    content = FileContent(
        content=part.text,
        content_type=part.kind,
        start_position=part.start,
        end_position=part.end,
        file_size=part.size,
        truncated=part.truncated,
    )
    return {"output": content.model_dump()}


def _count(name: str, value: int | None) -> None:
    """422 naming `name` when a count is negative."""
    if value is not None and value < 0:
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"{name} must not be negative",
            [{"name": name, "reason": "must be 0 or more"}],
        )


def _bounded_bytes(name: str, value: int) -> None:
    """422 naming `name` when more than MAX_READ bytes are asked for at once."""
    if value > MAX_READ:
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"at most {MAX_READ} bytes can be read at once; use view to page",
            [{"name": name, "reason": f"must be at most {MAX_READ}"}],
        )


def _one_unit(nbytes: int | None, lines: int | None) -> None:
    """422 when both `bytes` and `lines` are given."""
    if nbytes is not None and lines is not None:
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            "give bytes or lines, not both",
            [{"name": "bytes", "reason": "lines is given too"}],
        )


def head_result(
    engine: Engine, principal: Principal, resource_id: str, body: PostHeadRequest
) -> dict[str, Any]:
    """The `head` result: the first bytes or lines, or all but the last (`skipTrailing`)."""
    _count("bytes", body.bytes_)
    _count("lines", body.lines)
    _one_unit(body.bytes_, body.lines)
    if body.bytes_ is not None and not body.skip_trailing:
        _bounded_bytes("bytes", body.bytes_)
    return _content(
        _read(
            engine,
            principal,
            resource_id,
            body.path,
            "head",
            bytes=body.bytes_,
            lines=body.lines,
            skip=body.skip_trailing,
            limit=MAX_READ,
        )
    )


def tail_result(
    engine: Engine, principal: Principal, resource_id: str, body: PostTailRequest
) -> dict[str, Any]:
    """The `tail` result: the last bytes or lines, or all but the first (`skipHeading`)."""
    _one_unit(body.bytes_, body.lines)
    if body.bytes_ is not None and not body.skip_heading:
        _bounded_bytes("bytes", body.bytes_)
    return _content(
        _read(
            engine,
            principal,
            resource_id,
            body.path,
            "tail",
            bytes=body.bytes_,
            lines=body.lines,
            skip=body.skip_heading,
            limit=MAX_READ,
        )
    )


def view_result(
    engine: Engine, principal: Principal, resource_id: str, body: PostViewRequest
) -> dict[str, Any]:
    """The `view` result: `size` bytes (at most MAX_READ) from `offset`."""
    wanted = body.size or MAX_READ
    _bounded_bytes("size", wanted)
    return _content(
        _read(engine, principal, resource_id, body.path, "view", offset=body.offset, size=wanted)
    )


def stat_result(
    engine: Engine, principal: Principal, resource_id: str, body: PostStatRequest
) -> dict[str, Any]:
    """The `stat` result of a file or folder."""
    found = _read(engine, principal, resource_id, body.path, "stat", dereference=body.dereference)
    return {"output": FileStat.model_validate(found).model_dump()}


def _file(entry: dict[str, Any], numeric: bool, name: str | None = None) -> File:
    """One reader listing entry as the official `File`."""
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


def ls_result(
    engine: Engine, principal: Principal, resource_id: str, body: PostLsRequest
) -> dict[str, Any]:
    """The `ls` result: a folder's entries (or the one file named), and whether cut short."""
    found = _read(
        engine,
        principal,
        resource_id,
        body.path,
        "ls",
        recursive=body.recursive,
        hidden=body.show_hidden,
        dereference=body.dereference,
        max_entries=MAX_ENTRIES,
        max_dereference=MAX_DEREFERENCE,
    )
    if not found["folder"]:
        name = posixpath.basename(body.path.rstrip("/"))
        only = _file(found["entries"][0], body.numeric_uid, name=name)
        return {"output": [only.model_dump()], "truncated": False}
    files = [_file(entry, body.numeric_uid) for entry in found["entries"]]
    return {"output": [f.model_dump() for f in files], "truncated": bool(found["truncated"])}
