"""The IRI `upload` and `download` operations, streamed: no whole file is ever held.

Confined exactly as the reads are (`iri_gateway.service.files`): the folders of the caller's
jobs and the roots the profile grants; missing, outside and other users' paths are the same
404. The bytes go through `service.files.transfers`, in-process or on the login node as the
caller's mapped account.

- upload: the official `multipart/form-data` body (part `file`), or, as an extension, the
  raw bytes (`application/octet-stream`); the body is read chunk by chunk into a temporary
  file beside the target, which is given its name only when complete and never replaces
  anything (409 when the name is taken). The request body may be at most
  `Settings.max_upload_bytes`: 413 before any byte is read when `Content-Length` says more,
  and as soon as the running count passes it otherwise, with nothing left behind; the
  app-wide `max_request_bytes` does not apply here.
- download: the official answer is a completed task whose `result.output` carries the file
  in base64, for files up to `TASK_DOWNLOAD_BYTES` (the official "small file"); with
  `Accept: application/octet-stream` (an extension) the file itself is the answer, streamed
  from the opened file, of any size.
"""

from __future__ import annotations

import base64
from collections.abc import Iterator
from enum import Enum
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep, SettingsDep
from iri_gateway.api.plumbing.multipart import FilePart, MultipartError, boundary_of
from iri_gateway.api.plumbing.problems import ApiProblem, FileOperation, file_problem
from iri_gateway.api.tasks.models import TaskSubmitResponse, completed_task
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.files.policy import PATH_MAX
from iri_gateway.service.files.refusals import FileRefusedError
from iri_gateway.service.files.transfers import Download, Upload, UserTransfers
from iri_gateway.service.jobs.engine import Engine

router = APIRouter(prefix="/api/v2", route_class=CallerFirstRoute)

UPLOAD_PREFIX = "/api/v2/filesystem/upload/"
"""Where uploads are served: the app-wide body limit leaves these to their own."""
TASK_DOWNLOAD_BYTES = 5 * 1024 * 1024
"""Largest file a download answers in its task (the official spec's small-file bound)."""
_FILESYSTEM: list[str | Enum] = ["filesystem"]
_OCTETS = "application/octet-stream"


def _problem(description: str) -> dict[str, Any]:
    return {
        "description": description,
        "content": {
            "application/problem+json": {"schema": {"$ref": "#/components/schemas/Problem"}}
        },
    }


_COMMON: dict[int | str, dict[str, Any]] = {
    404: _problem(
        "Not Found (also any path the caller may not use: outside "
        "the folders of the caller's jobs and the roots granted to the caller)"
    ),
    422: _problem("The path is not valid (names `path`)"),
}
_UPLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_COMMON,
    400: _problem(
        "The target is a folder (the job folder or a root itself), or the body is "
        "neither multipart/form-data nor application/octet-stream (the official "
        "spec has no 415: this is its 400 for invalid request parameters)"
    ),
    403: _problem("The operating system does not let the account create the file there"),
    409: _problem("Something already has the target's name (uploads never replace)"),
    413: _problem("The body is larger than the server's `max_upload_bytes`; nothing is written"),
}
_DOWNLOAD_RESPONSES: dict[int | str, dict[str, Any]] = {
    **_COMMON,
    200: {
        "description": "A completed task (`result.output`: the file in base64), or with "
        "`Accept: application/octet-stream` the file's bytes, streamed",
        "content": {_OCTETS: {"schema": {"type": "string", "format": "binary"}}},
    },
    400: _problem("The path is a folder or not a regular file"),
}
_UPLOAD_BODY = {
    "requestBody": {
        "required": True,
        "content": {
            "multipart/form-data": {
                "schema": {
                    "type": "object",
                    "title": "Body_upload",
                    "required": ["file"],
                    "properties": {
                        "file": {
                            "type": "string",
                            "format": "binary",
                            "title": "File",
                            "description": "File to be uploaded as `multipart/form-data`",
                        }
                    },
                }
            },
            _OCTETS: {
                "schema": {
                    "type": "string",
                    "format": "binary",
                    "description": "Extension: the file's bytes as the whole body",
                }
            },
        },
    }
}


class PostDownloadRequest(BaseModel):
    """Request body for the download endpoint."""

    # Fields beyond `path` are ignored, as every filesystem request body does: the official
    # schema allows them, so refusing them would refuse requests the official spec admits.
    model_config = ConfigDict(json_schema_extra={"examples": [{"path": "/home/user/file.txt"}]})
    path: str = Field(
        max_length=PATH_MAX,
        description="A file to download (at most 4096 "
        "bytes in UTF-8; relative paths are taken from the resource's job root)",
        examples=["/home/user/file.txt"],
    )


def _refusal(error: FileRefusedError, resource_id: str, path: str) -> ApiProblem:
    """A refusal of the service as the HTTP problem a person can act on."""
    return file_problem(
        error, operation=FileOperation.TRANSFER, resource_id=resource_id, asked={"path": path}
    )


def _transfers(engine: Engine, principal: Principal, resource_id: str) -> UserTransfers:
    return UserTransfers(
        engine.files(owner=principal.user, resource_id=resource_id, claims=principal.claims)
    )


def _too_large(limit: int, declared: int | None) -> ApiProblem:
    size = f" ({declared} bytes)" if declared is not None else ""
    return ApiProblem(
        413,
        "Content Too Large",
        f"the upload{size} is larger than the {limit} "
        "bytes this server accepts (its setting max_upload_bytes); nothing was "
        "written",
        [{"name": "file", "reason": f"must be at most {limit} bytes"}],
    )


def _declared(request: Request) -> int | None:
    try:
        return int(request.headers["content-length"])
    except (KeyError, ValueError):
        return None


def _parser(request: Request) -> FilePart | None:
    """The multipart reader for the body (None for raw bytes); 400 or 422 otherwise."""
    content_type = request.headers.get("content-type", "")
    try:
        boundary = boundary_of(content_type)
    except MultipartError as error:
        raise ApiProblem(
            422, "Unprocessable Entity", str(error), [{"name": "file", "reason": str(error)}]
        ) from None
    if boundary is not None:
        return FilePart(boundary, "file")
    if content_type.partition(";")[0].strip().lower() != _OCTETS:
        raise ApiProblem(
            400,
            "Bad Request",
            f"the body is {content_type!r}; send the file as "
            "multipart/form-data (part `file`) or as application/octet-stream",
            [
                {
                    "name": "file",
                    "reason": "missing: no multipart/form-data or application/octet-stream body",
                }
            ],
        )
    return None


async def _receive(request: Request, upload: Upload, parser: FilePart | None, limit: int) -> None:
    """The body into `upload`, counted against `limit`."""
    received = 0
    try:
        async for chunk in request.stream():
            received += len(chunk)
            if received > limit:
                raise _too_large(limit, _declared(request))
            for piece in parser.feed(chunk) if parser is not None else [chunk]:
                await run_in_threadpool(upload.write, piece)
        if parser is not None:
            parser.close()
    except MultipartError as error:
        raise ApiProblem(
            422, "Unprocessable Entity", str(error), [{"name": "file", "reason": str(error)}]
        ) from None


@router.post(
    "/filesystem/upload/{resource_id}",
    operation_id="upload",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Upload",
    responses=_UPLOAD_RESPONSES,
    openapi_extra=_UPLOAD_BODY,
    response_description="File uploaded successfully",
)
async def post_upload(
    resource_id: str,
    engine: EngineDep,
    settings: SettingsDep,
    principal: PrincipalDep,
    request: Request,
    path: Annotated[
        str,
        Query(
            max_length=PATH_MAX,
            description="Where the new file goes (at "
            "most 4096 bytes in UTF-8; it must not exist yet)",
        ),
    ],
) -> TaskSubmitResponse:
    """Upload a file, streamed (at most the server's `max_upload_bytes`, 64 GiB by default).

    The task's `result` is `{output: {path, size}}`. The file is written under a temporary
    name beside the target and named only when complete; an upload that fails or is cut off
    leaves nothing. An existing target is never replaced (409).
    """
    limit = settings.max_upload_bytes
    declared = _declared(request)
    if declared is not None and declared > limit:
        raise _too_large(limit, declared)
    parser = _parser(request)
    transfers = await run_in_threadpool(_transfers, engine, principal, resource_id)
    try:
        upload = await run_in_threadpool(transfers.upload, path)
    except FileRefusedError as error:
        raise _refusal(error, resource_id, path) from None
    try:
        await _receive(request, upload, parser, limit)
        size = await run_in_threadpool(upload.commit)
    except FileRefusedError as error:
        raise _refusal(error, resource_id, path) from None
    except ClientDisconnect:
        raise ApiProblem(
            400,
            "Bad Request",
            "the client went away before the upload was complete; nothing was written",
        ) from None
    finally:
        await run_in_threadpool(upload.abort)
    result = {"output": {"path": path, "size": size}}
    return completed_task(request, principal, "upload", {"path": path}, result)


def _wants_bytes(accept: str) -> bool:
    """True when the caller asks for the file itself (`Accept: application/octet-stream`)."""
    for item in accept.split(","):
        kind, _, parameters = item.partition(";")
        if kind.strip().lower() == _OCTETS:
            return "q=0" not in parameters.replace(" ", "") or "q=0." in parameters
    return False


def _streamed(download: Download) -> Iterator[bytes]:
    try:
        yield from download.chunks
    finally:
        download.close()


@router.post(
    "/filesystem/download/{resource_id}",
    operation_id="download",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Download",
    responses=_DOWNLOAD_RESPONSES,
    response_description="File downloaded successfully",
)
def post_download(
    resource_id: str,
    body: PostDownloadRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> Response | TaskSubmitResponse:
    """Download a file: as a task (`result.output`: `{content, content_type: "base64",
    file_size}`) for files up to 5 MiB, or of any size streamed with `Accept:
    application/octet-stream` (an extension)."""
    try:
        download = _transfers(engine, principal, resource_id).download(body.path)
    except FileRefusedError as error:
        raise _refusal(error, resource_id, body.path) from None
    if _wants_bytes(request.headers.get("accept", "")):
        name = body.path.rstrip("/").rpartition("/")[2] or "download"
        headers = {
            "Content-Length": str(download.size),
            "Content-Disposition": f"attachment; filename*=UTF-8''{quote(name, safe='')}",
        }
        return StreamingResponse(
            _streamed(download),
            media_type=_OCTETS,
            headers=headers,
            background=BackgroundTask(download.close),
        )
    try:
        if download.size > TASK_DOWNLOAD_BYTES:
            raise ApiProblem(
                422,
                "Unprocessable Entity",
                f"{body.path!r} is {download.size} "
                f"bytes; a download task carries at most {TASK_DOWNLOAD_BYTES}: "
                "ask with `Accept: application/octet-stream` to stream it",
                [{"name": "path", "reason": f"is larger than {TASK_DOWNLOAD_BYTES} bytes"}],
            )
        data = b"".join(download.chunks)
    finally:
        download.close()
    output = {
        "content": base64.b64encode(data).decode("ascii"),
        "content_type": "base64",
        "file_size": download.size,
    }
    return completed_task(request, principal, "download", {"path": body.path}, {"output": output})
