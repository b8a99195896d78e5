"""The IRI `filesystem` operations `mkdir`, `rm`, `mv`, `cp`, `chmod`, `chown`, `symlink`,
`compress`, `extract`, `file` and `checksum`, at their official paths, with their official
operationIds.

As for `ls` (`filesystem`), each is a POST answered with a `TaskSubmitResponse` (its `result`
read through `getTask`). The short ones are done before the answer (the task is `completed`);
`cp`, `compress` and `extract` are checked and placed first (a missing `path`, an existing
`target_path`, a bad field or an unknown resource is answered at once), then run as a
background task (`pending`, `active` with progress, then `completed` or `failed` with the
problem in `result.error`). A request that cannot be served is answered with problem+json
(`file_changes` says which status means what). The routes only: bodies in
`filesystem_write_models`, the HTTP mapping in `file_changes`, what may be changed and how in
`iri_gateway.service.files.writes`, one helper (`_task`) for all.
"""

from __future__ import annotations

from collections.abc import Callable
from enum import Enum
from typing import Any

from fastapi import APIRouter, Request
from pydantic import BaseModel

from iri_gateway.api.filesystem.write_models import (
    PostChecksumRequest,
    PostCompressRequest,
    PostCopyRequest,
    PostExtractRequest,
    PostFileRequest,
    PostFileSymlinkRequest,
    PostMakeDirRequest,
    PostMoveRequest,
    PostRmRequest,
    PutFileChmodRequest,
    PutFileChownRequest,
)
from iri_gateway.api.filesystem.write_operations import (
    account_name,
    change,
    compression_type,
    match_pattern,
    octal_mode,
    ready_to_run,
    refusing,
    required,
    user_writes,
)
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep
from iri_gateway.api.tasks.models import TaskSubmitResponse, background_task, completed_task
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.files.writes import Prepared
from iri_gateway.service.operations.settings import Settings

router = APIRouter(prefix="/api/v2/filesystem", route_class=CallerFirstRoute)

_FILESYSTEM: list[str | Enum] = ["filesystem"]


def _responses(*statuses: int) -> dict[int | str, dict[str, Any]]:
    said = {
        400: "Bad Request (for `cp`, `compress` and `extract`, found as they run: their "
        "task's `result.error`): the path is not the kind of file the operation needs; for "
        "`extract`, not a tar archive, or a member (named) that is absolute, has a `..` "
        "component or a control character, is a device or fifo, or is a link that "
        "could point outside the extracted folder; for `compress`, `dereference`",
        403: "Forbidden: a root or job folder itself as what is removed, moved, replaced or "
        "archived; "
        "a tree holding the gateway's folders; a link that would point outside; or "
        "what the operating system refuses your account (its reason given)",
        404: "Not Found (also any path the caller may not use: outside the folders of the "
        "caller's jobs and the roots granted to the caller)",
        409: "Conflict: the target exists (nothing is overwritten), a folder is not empty, "
        "or a move would cross filesystems",
        413: "Content Too Large (found as the operation runs: its task's `result.error`): the "
        "copy, the archive or what it holds is beyond the configured limits "
        "(`cp_max_files`, `cp_max_bytes`)",
        501: "Not Implemented: the `file` command (libmagic) is missing where the files are",
    }
    return {status: {"description": said[status]} for status in statuses}


def _settings(request: Request) -> Settings:
    settings: Settings = request.app.state.settings
    return settings


def _task(
    request: Request,
    principal: Principal,
    resource_id: str,
    command: str,
    body: BaseModel,
    asked: dict[str, str],
    run: Callable[[], dict[str, Any] | Prepared],
) -> TaskSubmitResponse:
    """Operation `command` as the caller's task: `run()` refused as HTTP problems (`asked`
    names the paths the caller gave, for the messages). A short change is made now and
    recorded `completed`; a long one (`run()` gives it `Prepared`) is checked further
    (`ready_to_run`) and queued as a `pending` task, its refusals then its task's error."""
    done = refusing(resource_id, asked, run)
    if not isinstance(done, Prepared):
        return completed_task(
            request, principal, command, body.model_dump(), change(resource_id, asked, lambda: done)
        )
    ready_to_run(resource_id, asked, done)
    return background_task(
        request,
        principal,
        command,
        body.model_dump(),
        lambda progress: change(resource_id, asked, lambda: done.run(progress)),
    )


@router.post(
    "/mkdir/{resource_id}",
    operation_id="mkdir",
    tags=_FILESYSTEM,
    status_code=201,
    response_model=TaskSubmitResponse,
    summary="Post Mkdir",
    responses=_responses(400, 403, 404, 409),
    response_description="Directory created successfully",
)
def post_mkdir(
    resource_id: str,
    body: PostMakeDirRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Create directory operation (`mkdir`); with `parent`, the missing folders above too.

    The task's `result` is `{output: File}` (the new folder, its absolute path as `name`).
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    return _task(
        request,
        principal,
        resource_id,
        "mkdir",
        body,
        {"path": path},
        lambda: writes.mkdir(path, body.parent),
    )


@router.post(
    "/rm/{resource_id}",
    operation_id="rm",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Rm",
    responses=_responses(400, 403, 404, 409),
    response_description="File or directory deleted successfully",
)
def post_rm(
    resource_id: str,
    body: PostRmRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Delete file or directory operation (`rm`).

    A directory only with `recursive` (an extension); links are removed, never followed. A
    root or a job folder itself is never removed. The task's `result` is `{output: path}`.
    """
    writes = user_writes(engine, principal, resource_id)
    return _task(
        request,
        principal,
        resource_id,
        "rm",
        body,
        {"path": body.path},
        lambda: writes.rm(body.path, body.recursive),
    )


@router.post(
    "/mv/{resource_id}",
    operation_id="mv",
    tags=_FILESYSTEM,
    status_code=201,
    response_model=TaskSubmitResponse,
    summary="Post Mv",
    responses=_responses(400, 403, 404, 409),
    response_description="Move file or directory operation created successfully",
)
def post_mv(
    resource_id: str,
    body: PostMoveRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Move file or directory operation (`mv`): `path` gets the new name `target_path`.

    An existing `target_path` is never replaced (409); across filesystems, 409 (copy, then
    remove). The task's `result` is `{output: File}` (the moved file at its new place).
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    return _task(
        request,
        principal,
        resource_id,
        "mv",
        body,
        {"path": path, "target_path": body.target_path},
        lambda: writes.mv(path, body.target_path),
    )


@router.post(
    "/cp/{resource_id}",
    operation_id="cp",
    tags=_FILESYSTEM,
    status_code=201,
    response_model=TaskSubmitResponse,
    summary="Post Cp",
    responses=_responses(400, 403, 404, 409, 413),
    response_description="Copy file or directory operation created successfully",
)
def post_cp(
    resource_id: str,
    body: PostCopyRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Copy file or directory operation (`cp`): a file, a link or a whole folder.

    Bounded: at most `cp_max_files` files, folders and links and `cp_max_bytes` bytes
    (settings; 413 beyond, counted before anything is copied). Links are copied as links,
    only when they point inside from their new place. An existing `target_path` is never
    replaced (409). The task's `result` is `{output: File}` (the copy).

    A background task: answered `pending` once `path` is found and `target_path` is free;
    `result.progress` while `active`; a refusal met as it runs is its `result.error`, and
    what it had written is removed. Deleting the task while it runs cancels it.
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    settings = _settings(request)
    return _task(
        request,
        principal,
        resource_id,
        "cp",
        body,
        {"path": path, "target_path": body.target_path},
        lambda: writes.cp(
            path,
            body.target_path,
            dereference=body.dereference,
            max_files=settings.cp_max_files,
            max_bytes=settings.cp_max_bytes,
        ),
    )


@router.post(
    "/chmod/{resource_id}",
    operation_id="chmod",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Chmod",
    responses=_responses(403, 404),
    response_description="File permissions changed successfully",
)
def post_chmod(
    resource_id: str,
    body: PutFileChmodRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Change the permission mode of a file (`chmod`); links inside are followed.

    The task's `result` is `{output: File}` (after the change).
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    mode = octal_mode(body.mode)
    return _task(
        request,
        principal,
        resource_id,
        "chmod",
        body,
        {"path": path, "mode": mode},
        lambda: writes.chmod(path, mode),
    )


@router.post(
    "/chown/{resource_id}",
    operation_id="chown",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Chown",
    responses=_responses(403, 404),
    response_description="File ownership changed successfully",
)
def post_chown(
    resource_id: str,
    body: PutFileChownRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Change the ownership of a given file (`chown`), as far as the operating system lets
    the account (no privilege is added: its refusal is a 403 with its reason).

    Names are looked up where the files are; an unknown one is a 422 naming the field. The
    task's `result` is `{output: File}` (after the change).
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    owner, group = account_name(body.owner, "owner"), account_name(body.group, "group")
    if not owner and not group:
        required(None, "owner")
    return _task(
        request,
        principal,
        resource_id,
        "chown",
        body,
        {"path": path, "owner": owner, "group": group},
        lambda: writes.chown(path, owner, group),
    )


@router.post(
    "/symlink/{resource_id}",
    operation_id="symlink",
    tags=_FILESYSTEM,
    status_code=201,
    response_model=TaskSubmitResponse,
    summary="Post Symlink",
    responses=_responses(403, 404, 409),
    response_description="Symlink created successfully",
)
def post_symlink(
    resource_id: str,
    body: PostFileSymlinkRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Create symlink operation (`ln -s`): a link at `link_path` pointing to `path`.

    `path` (relative: from the link's folder) must name, lexically, a path inside the
    folders you may use (it need not exist), and still lead there when followed through the
    links that exist on its way (each resolved from its own folder; at most 40); 403
    naming `path` otherwise. The task's `result` is `{output: File}` (the new link).
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    return _task(
        request,
        principal,
        resource_id,
        "symlink",
        body,
        {"path": path, "link_path": body.link_path},
        lambda: writes.symlink(path, body.link_path),
    )


@router.post(
    "/file/{resource_id}",
    operation_id="file",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post File",
    responses=_responses(404, 501),
    response_description="Type returned successfully",
)
def post_file(
    resource_id: str,
    body: PostFileRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Output the type of a file or directory (`file`).

    A regular file's first 64 KiB are shown to libmagic (the `file -b -` command, run where
    the files are, as the account); folders, links and special files are told from their
    `lstat`. The task's `result` is `{output: description}`.
    """
    writes = user_writes(engine, principal, resource_id)
    return _task(
        request,
        principal,
        resource_id,
        "file",
        body,
        {"path": body.path},
        lambda: writes.file_type(body.path),
    )


@router.post(
    "/checksum/{resource_id}",
    operation_id="checksum",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Checksum",
    responses=_responses(400, 404),
    response_description="Checksum returned successfully",
)
def post_checksum(
    resource_id: str,
    body: PostChecksumRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Output the checksum of a file (using SHA-256 algorithm).

    The task's `result` is `{output: {algorithm: "SHA-256", checksum: hex}}`.
    """
    writes = user_writes(engine, principal, resource_id)
    return _task(
        request,
        principal,
        resource_id,
        "checksum",
        body,
        {"path": body.path},
        lambda: writes.checksum(body.path),
    )


@router.post(
    "/compress/{resource_id}",
    operation_id="compress",
    tags=_FILESYSTEM,
    status_code=201,
    response_model=TaskSubmitResponse,
    summary="Post Compress",
    responses=_responses(400, 403, 404, 409, 413),
    response_description="File and/or directories compressed successfully",
)
def post_compress(
    resource_id: str,
    body: PostCompressRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Compress files and directories into a tar archive (`tar`), where the files are, as
    your account.

    Symbolic links are stored as links, never followed (`dereference` is refused). Bounded
    like `cp` (`cp_max_files` entries, `cp_max_bytes` bytes; 413 beyond, counted before the
    archive is written). An existing `target_path` is never replaced (409). The task's
    `result` is `{output: File}` (the archive).

    A background task: answered `pending` once `path` is found and `target_path` is free;
    `result.progress` while `active`; a refusal met as it runs is its `result.error`, and
    what it had written is removed. Deleting the task while it runs cancels it.
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    kind, pattern = compression_type(body.compression), match_pattern(body.match_pattern)
    settings = _settings(request)
    return _task(
        request,
        principal,
        resource_id,
        "compress",
        body,
        {"path": path, "target_path": body.target_path},
        lambda: writes.compress(
            path,
            body.target_path,
            compression=kind,
            dereference=body.dereference,
            match_pattern=pattern,
            max_files=settings.cp_max_files,
            max_bytes=settings.cp_max_bytes,
        ),
    )


@router.post(
    "/extract/{resource_id}",
    operation_id="extract",
    tags=_FILESYSTEM,
    status_code=201,
    response_model=TaskSubmitResponse,
    summary="Post Extract",
    responses=_responses(400, 403, 404, 409, 413),
    response_description="File extracted successfully",
)
def post_extract(
    resource_id: str,
    body: PostExtractRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Extract a tar archive (`tar -x`) into `target_path`, a new folder or an existing one,
    where the files are, as your account.

    The whole archive is checked first: a member that would not stay inside (absolute, `..`,
    a link that is absolute or has `..`, a hard link to anything but an earlier file), a
    device or fifo, or a control character in a name is a 400 naming it; more than
    `cp_max_files` members or `cp_max_bytes` bytes (declared, and as written) a 413. It is
    extracted into a fresh hidden folder beside `target_path` (inside it, when it exists),
    moved there only when complete: a failed extract leaves nothing. Into an existing folder
    nothing is replaced or merged: a name the archive adds that is already there (or made
    meanwhile) is a 409 naming it, nothing written. A `target_path` that is a file is a 409.
    The task's `result` is `{output: File}` (the folder extracted into).

    A background task: answered `pending` once `path` is found and `target_path` is
    usable; `result.progress` while `active`; a refusal met as it runs is its
    `result.error`, and what it had written is removed. Deleting the task while it runs
    cancels it.
    """
    writes = user_writes(engine, principal, resource_id)
    path = required(body.path)
    kind = compression_type(body.compression)
    settings = _settings(request)
    return _task(
        request,
        principal,
        resource_id,
        "extract",
        body,
        {"path": path, "target_path": body.target_path},
        lambda: writes.extract(
            path,
            body.target_path,
            compression=kind,
            max_files=settings.cp_max_files,
            max_bytes=settings.cp_max_bytes,
        ),
    )
