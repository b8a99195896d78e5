"""Compute extension: the elements of an array job.

`GET /compute/job/{resource}/{job}/elements` pages the elements (index, state, the
scheduler's word, exit code), optionally of one state; `DELETE` of the same path with
`indices` cancels those elements (the others run on). The whole array is canceled by the
standard cancelJob. Another user's job is a 404, as everywhere.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Response
from pydantic import BaseModel, Field
from starlette.concurrency import run_in_threadpool

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep, SettingsDep
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.models.job import JobState
from iri_gateway.models.job_arrays import MAX_TEXT, TEXT_PATTERN, ArrayIndices, ArrayIndicesError
from iri_gateway.service.jobs.engine import Engine, JobNotFoundError

router = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)

MAX_PAGE = 1000
"""Elements in one page at most."""


class ElementView(BaseModel):
    """One element of an array job."""

    index: int = Field(description="The element's index (its IRI_ARRAY_INDEX)")
    state: JobState = Field(description="The element's IRI state")
    native_state: str = Field(
        description="The scheduler's word for it (empty before the scheduler reported it)"
    )
    exit_code: int | None = Field(description="Its exit code once it ended, if known")


class ElementPageView(BaseModel):
    """A page of an array job's elements, in ascending order of index."""

    total: int = Field(description="How many elements match (all, or those in `state`)")
    offset: int = Field(description="The position of the first element of this page")
    elements: list[ElementView]


def _owned(engine: Engine, owner: str, resource_id: str, job_id: str) -> None:
    record = engine.get(owner=owner, job_id=job_id)
    if record.resource_id != resource_id:
        raise JobNotFoundError(f"no job {job_id!r} on {resource_id!r}")


def _page(
    engine: Engine,
    owner: str,
    resource_id: str,
    job_id: str,
    offset: int,
    limit: int,
    state: JobState | None,
) -> ElementPageView:
    _owned(engine, owner, resource_id, job_id)
    page = engine.elements(owner=owner, job_id=job_id, offset=offset, limit=limit, state=state)
    return ElementPageView(
        total=page.total,
        offset=offset,
        elements=[
            ElementView(
                index=index,
                state=status.state,
                native_state=status.native_state,
                exit_code=status.exit_code,
            )
            for index, status in page.elements
        ],
    )


_RESPONSES: dict[int | str, dict[str, str]] = {
    404: {"description": "Not Found: no such job of the caller on this resource"},
    409: {"description": "Conflict: the job is not an array"},
}


@router.get(
    "/job/{resource_id}/{job_id}/elements",
    operation_id="listJobElements",
    response_model=ElementPageView,
    summary="List the elements of an array job (extension)",
    responses=_RESPONSES,
)
async def list_job_elements(
    resource_id: str,
    job_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    offset: Annotated[int, Query(ge=0, le=10_000_000)] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE)] = 100,
    state: Annotated[JobState | None, Query(description="Only elements in this state")] = None,
) -> ElementPageView:
    """The elements of your array job, as the gateway last read them from the scheduler
    (the poller keeps them current), `limit` at a time from `offset`."""
    return await run_in_threadpool(
        _page, engine, principal.user, resource_id, job_id, offset, limit, state
    )


def _cancel(
    engine: Engine, owner: str, resource_id: str, job_id: str, indices: ArrayIndices, wait: float
) -> None:
    _owned(engine, owner, resource_id, job_id)
    engine.cancel_elements(owner=owner, job_id=job_id, indices=indices, wait=wait)


@router.delete(
    "/job/{resource_id}/{job_id}/elements",
    operation_id="cancelJobElements",
    status_code=204,
    summary="Cancel chosen elements of an array job (extension)",
    responses={
        **_RESPONSES,
        409: {
            "description": "Conflict: the job is not an array, is not with the scheduler "
            "yet, or the scheduler refused (its words in `detail`)"
        },
        422: {"description": "Unprocessable: `indices` is not a set of the array's indices"},
        503: {
            "description": "Service Unavailable: the scheduler cannot be reached now; the "
            "cancel was not sent: send it again after `Retry-After`"
        },
    },
)
async def cancel_job_elements(
    resource_id: str,
    job_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    settings: SettingsDep,
    indices: Annotated[
        str,
        Query(
            min_length=1,
            max_length=MAX_TEXT,
            json_schema_extra={"pattern": TEXT_PATTERN},  # checked below, with the reason
            description='The elements to cancel, as the array\'s `indices` are written: "3", '
            '"0-9", "0-9:2,15" (ranges ascending and apart)',
        ),
    ],
) -> Response:
    """Cancel these elements of your array job: those waiting never start, those running
    are stopped; the others run on. Elements that already ended are not an error."""
    try:
        chosen = ArrayIndices.parse(indices)
    except ArrayIndicesError as error:  # the grammar is the pattern's; this is its meaning
        raise ApiProblem(
            422,
            "Unprocessable Entity",
            f"indices: {error}",
            [{"name": "indices", "reason": str(error)}],
        ) from None
    await run_in_threadpool(
        _cancel, engine, principal.user, resource_id, job_id, chosen, settings.response_wait
    )
    return Response(status_code=204)
