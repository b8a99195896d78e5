"""The IRI `filesystem` operations `ls`, `head`, `tail`, `view` and `stat`.

As in the official spec, each filesystem operation is a POST that answers with a
`TaskSubmitResponse`; the result is then read through `GET /api/v2/task/{task_id}`
(`api/tasks/routes.py`), on any replica (tasks are kept in the store). These reads are done
before the answer, so their task is already `completed`; a request that cannot be served is
answered at once with problem+json. The long operations that run in the background are in
`write_routes`.

The routes only: the bodies are in `read_models`, the checks and reads (through the
service, which alone decides what a caller may read) in `read_operations`, the tasks in
`api/tasks/models.py`.
"""

from __future__ import annotations

from enum import Enum
from typing import Any

from fastapi import APIRouter, Request

from iri_gateway.api.filesystem.read_models import (
    PostHeadRequest,
    PostLsRequest,
    PostStatRequest,
    PostTailRequest,
    PostViewRequest,
)
from iri_gateway.api.filesystem.read_operations import (
    head_result,
    ls_result,
    stat_result,
    tail_result,
    view_result,
)
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, KnownResource, PrincipalDep
from iri_gateway.api.tasks.models import TaskSubmitResponse, completed_task

router = APIRouter(prefix="/api/v2", route_class=CallerFirstRoute)

_FILESYSTEM: list[str | Enum] = ["filesystem"]

_RESPONSES: dict[int | str, dict[str, Any]] = {
    404: {
        "description": "Not Found: an unknown resource (whatever the body), or a path the "
        "caller may not read (outside the folders of the caller's jobs and the roots "
        "granted to the caller)"
    },
}


@router.post(
    "/filesystem/ls/{resource_id}",
    operation_id="ls",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Ls",
    responses=_RESPONSES,
    response_description="Directory listed successfully",
)
def post_ls(
    resource_id: KnownResource,
    body: PostLsRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """List the contents of the given directory (`ls`) asynchronously.

    The task's `result` is `{output: [File], truncated}`; entries are sorted by name, at most
    10000. With `dereference`, links that point inside the folder read from (the job folder or
    granted root) show their target; the others are shown as links. `recursive` never
    follows links into directories.
    """
    result = ls_result(engine, principal, resource_id, body)
    return completed_task(request, principal, "ls", body.model_dump(by_alias=True), result)


@router.post(
    "/filesystem/head/{resource_id}",
    operation_id="head",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Head",
    responses=_RESPONSES,
    response_description="Head operation finished successfully",
)
def post_head(
    resource_id: KnownResource,
    body: PostHeadRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Output the first part of file/s (`head`).

    The task's `result` is `{output: FileContent}`: at most 1 MiB; 10 lines by default.
    """
    result = head_result(engine, principal, resource_id, body)
    return completed_task(request, principal, "head", body.model_dump(by_alias=True), result)


@router.post(
    "/filesystem/view/{resource_id}",
    operation_id="view",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post View",
    responses=_RESPONSES,
    response_description="View operation finished successfully",
)
def post_view(
    resource_id: KnownResource,
    body: PostViewRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """View file content (up to max 1048576 bytes per request; page with `offset`)."""
    result = view_result(engine, principal, resource_id, body)
    return completed_task(request, principal, "view", body.model_dump(by_alias=True), result)


@router.post(
    "/filesystem/tail/{resource_id}",
    operation_id="tail",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Tail",
    responses=_RESPONSES,
    response_description="`tail` operation finished successfully",
)
def post_tail(
    resource_id: KnownResource,
    body: PostTailRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Output the last part of a file (`tail`).

    The task's `result` is `{output: FileContent}`: at most 1 MiB; 10 lines by default;
    `skipHeading` leaves out exactly the first NUM bytes or lines.
    """
    result = tail_result(engine, principal, resource_id, body)
    return completed_task(request, principal, "tail", body.model_dump(by_alias=True), result)


@router.post(
    "/filesystem/stat/{resource_id}",
    operation_id="stat",
    tags=_FILESYSTEM,
    response_model=TaskSubmitResponse,
    summary="Post Stat",
    responses=_RESPONSES,
    response_description="Stat returned successfully",
)
def post_stat(
    resource_id: KnownResource,
    body: PostStatRequest,
    engine: EngineDep,
    principal: PrincipalDep,
    request: Request,
) -> TaskSubmitResponse:
    """Output the `stat` of a file; the task's `result` is `{output: FileStat}`."""
    result = stat_result(engine, principal, resource_id, body)
    return completed_task(request, principal, "stat", body.model_dump(by_alias=True), result)
