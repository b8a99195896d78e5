"""Compute extensions that answer for every resource at once: all capabilities in one list,
and the caller's jobs on every resource one page at a time.

A client showing every resource (the console's sites page) or every job (its jobs page)
would otherwise send one request per resource and page through each; these answer it with
one request. They add nothing a client could not read through the per-resource routes: the
same capability documents, the same jobs of the same caller.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Annotated, Any

from fastapi import APIRouter, Query
from pydantic import BaseModel, Field

from iri_gateway.api.compute.models import Job, job_view
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep, SettingsDep
from iri_gateway.api.plumbing.official import StrictBool
from iri_gateway.models.job import JobState
from iri_gateway.profiles.capabilities import Capabilities, capabilities

router = APIRouter(prefix="/api/v2/compute", tags=["extensions"], route_class=CallerFirstRoute)

MAX_PAGE = 200
"""The most jobs one page holds: enough for any screen, small enough to answer quickly."""
MAX_TEXT = 200

_AUTH: dict[int | str, dict[str, Any]] = {
    401: {"description": "Unauthorized: no bearer token, or one the gateway does not accept"},
}


class JobsShown(StrEnum):
    """Which of the caller's jobs a page lists, by state."""

    ALL = "all"
    UNFINISHED = "unfinished"
    FINISHED = "finished"

    def states(self) -> list[JobState] | None:
        """The states admitted (None: every state)."""
        if self is JobsShown.ALL:
            return None
        return [s for s in JobState if s.final == (self is JobsShown.FINISHED)]


class JobPage(BaseModel):
    """One page of the caller's jobs, newest first, and how many match in all."""

    total: int = Field(
        ge=0, description="How many of the caller's jobs match the filters, on every page together"
    )
    offset: int = Field(
        ge=0, description="The position of the page's first job among them (0: the newest)"
    )
    limit: int = Field(ge=1, le=MAX_PAGE, description="The most jobs the page could hold")
    jobs: list[Job] = Field(description="The page's jobs, newest first (official `Job`)")


@router.get(
    "/capabilities",
    operation_id="listComputeCapabilities",
    response_model=list[Capabilities],
    responses=_AUTH,
    summary="Capabilities of every resource (extension)",
)
def list_capabilities(
    engine: EngineDep, principal: PrincipalDep, settings: SettingsDep
) -> list[Capabilities]:
    """Extension: the capability document of every loaded resource, in the order of
    `GET /status/resources`; each is what `GET /compute/capabilities/{resource_id}` answers."""
    return [
        capabilities(loaded, max_request_bytes=settings.max_request_bytes)
        for loaded in engine.resources()
    ]


@router.get(
    "/jobs",
    operation_id="listMyJobs",
    response_model=JobPage,
    response_model_exclude_none=True,
    responses=_AUTH,
    summary="The caller's jobs on every resource, paged (extension)",
)
def list_my_jobs(
    engine: EngineDep,
    principal: PrincipalDep,
    offset: Annotated[int, Query(ge=0, description="Jobs to skip, newest first")] = 0,
    limit: Annotated[int, Query(ge=1, le=MAX_PAGE, description="The most jobs to return")] = 50,
    state: Annotated[
        JobsShown,
        Query(
            description="`unfinished`: new, queued, held, active; "
            "`finished`: completed, failed, canceled"
        ),
    ] = JobsShown.ALL,
    text: Annotated[
        str | None,
        Query(
            max_length=MAX_TEXT, description="Only jobs whose name or id contains this (any case)"
        ),
    ] = None,
    include_spec: StrictBool | None = False,
) -> JobPage:
    """Extension: the caller's own jobs on every resource, newest first, one page of them,
    with the number matching in all (`total`); each job as `getJob` shows it. Another user's
    jobs are neither listed nor counted."""
    page = engine.job_page(
        owner=principal.user, states=state.states(), text=text or None, offset=offset, limit=limit
    )
    return JobPage(
        total=page.total,
        offset=offset,
        limit=limit,
        jobs=[
            job_view(r, include_spec=bool(include_spec), ports_origin=engine.proxy.settings.url)
            for r in page.records
        ],
    )
