"""The IRI `account` operations: capabilities, the caller's projects and their allocations.

Everything comes from configuration; the gateway keeps no allocation ledger.

- A capability is one compute resource, allocated in node hours
  (`urn:doe-iri:allocation:compute:node-hours`); its id is the resource id. As in the official
  spec, the capability operations need no token (they carry no user data).
- Projects are the projects of the caller's token (`Principal.projects`) and those a
  resource's `project_rules` grant from the caller's claims, exactly the ones launchJob and
  updateJob let it charge (`api.plumbing.projects`); any other project is 404. A token
  without projects, on resources without rules, lists none and may charge none.
  `user_ids` holds only the caller: the gateway has no project membership directory.
- A project has one allocation per compute resource it may be charged on (a token's project:
  every resource; one a rule grants: the resources whose rules grant it),
  `<project>:<resource>`, and the caller one user allocation in each,
  `<project>:<resource>:<user>`. No limit or usage is known, so `entries` is empty (the
  official `AllocationEntry` needs numeric `allocation` and `usage`; inventing them would be
  a lie) and `attributes.limits_known` is false.
"""

from __future__ import annotations

import os
from datetime import datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from iri_gateway.api.account.models import (
    Capability,
    Project,
    ProjectAllocation,
    UserAllocation,
)
from iri_gateway.api.facility.catalog import Catalog, CatalogDep, ModifiedSince, not_modified
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep
from iri_gateway.api.plumbing.official import NODE_HOURS, link, utc_timestamp
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.plumbing.projects import projects_on
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.service.accounts.auth import Principal, TokenFile
from iri_gateway.service.jobs.engine import Engine

router = APIRouter(prefix="/api/v2/account", tags=["account"], route_class=CallerFirstRoute)


def _resources(catalog: Catalog) -> list[LoadedResource]:
    return [loaded for site in catalog.sites for loaded in site.resources]


def capability_view(request: Request, catalog: Catalog, loaded: LoadedResource) -> Capability:
    """The capability of one compute resource."""
    return Capability(
        id=loaded.id,
        name=loaded.resource.name,
        description=f"Node hours on {loaded.id}",
        last_modified=catalog.modified[loaded.id],
        units=[NODE_HOURS],
        self_uri=link(request, "account", "capabilities", loaded.id),
        attributes={"resource_uri": link(request, "status", "resources", loaded.id)},
    )


def _capability(catalog: Catalog, capability_id: str) -> LoadedResource:
    for loaded in _resources(catalog):
        if loaded.id == capability_id:
            return loaded
    known = ", ".join(r.id for r in _resources(catalog))
    raise ApiProblem(404, "Not Found", f"no capability {capability_id!r}; capabilities: {known}")


def _granted(
    engine: Engine, catalog: Catalog, principal: Principal
) -> dict[str, list[LoadedResource]]:
    """Each project the caller may charge, in order (the token's first), with the resources
    it may be charged on."""
    where: dict[str, list[LoadedResource]] = {project: [] for project in principal.projects}
    for loaded in _resources(catalog):
        for project in projects_on(engine, principal, loaded.id).projects:
            where.setdefault(project, []).append(loaded)
    return where


def _project(
    engine: Engine, catalog: Catalog, principal: Principal, project_id: str
) -> list[LoadedResource]:
    """The resources the caller may charge `project_id` on (404 when none)."""
    resources = _granted(engine, catalog, principal).get(project_id)
    if resources is None:
        raise ApiProblem(404, "Not Found", f"user {principal.user!r} has no project {project_id!r}")
    return resources


def _allocation(
    resources: list[LoadedResource], project_id: str, allocation_id: str
) -> LoadedResource:
    for loaded in resources:
        if allocation_id == f"{project_id}:{loaded.id}":
            return loaded
    raise ApiProblem(
        404, "Not Found", f"project {project_id!r} has no allocation {allocation_id!r}"
    )


def _tokens_modified(request: Request, catalog: Catalog) -> datetime:
    tokens: TokenFile = request.app.state.tokens
    try:
        return utc_timestamp(os.stat(tokens.path).st_mtime)
    except OSError:
        return catalog.started


def project_view(
    request: Request, catalog: Catalog, principal: Principal, project_id: str
) -> Project:
    how = (
        "as the caller's token names it"
        if project_id in principal.projects
        else "as resources' project rules grant it from the caller's identity"
    )
    return Project(
        id=project_id,
        name=project_id,
        description=f"Project {project_id}, {how}",
        user_ids=[principal.user],
        last_modified=_tokens_modified(request, catalog),
        self_uri=link(request, "account", "projects", project_id),
    )


def allocation_view(request: Request, project_id: str, loaded: LoadedResource) -> ProjectAllocation:
    allocation_id = f"{project_id}:{loaded.id}"
    return ProjectAllocation(
        id=allocation_id,
        entries=[],
        project_uri=link(request, "account", "projects", project_id),
        capability_uri=link(request, "account", "capabilities", loaded.id),
        attributes={"resource_id": loaded.id, "limits_known": False},
    )


def user_allocation_view(
    request: Request, principal: Principal, project_id: str, loaded: LoadedResource
) -> UserAllocation:
    allocation_id = f"{project_id}:{loaded.id}"
    return UserAllocation(
        id=f"{allocation_id}:{principal.user}",
        user_id=principal.user,
        entries=[],
        project_allocation_uri=link(
            request, "account", "projects", project_id, "project_allocations", allocation_id
        ),
        attributes={"limits_known": False},
    )


@router.get(
    "/capabilities",
    operation_id="getCapabilities",
    response_model=list[Capability],
    response_model_exclude_none=True,
    summary="Get the list of capabilities",
)
async def get_capabilities(
    request: Request,
    catalog: CatalogDep,
    name: Annotated[str | None, Query(min_length=1)] = None,
    modified_since: ModifiedSince = None,
    offset: Annotated[int, Query(ge=0, le=1000)] = 0,
    limit: Annotated[int, Query(ge=0, le=1000)] = 100,
) -> list[Capability]:
    """One capability per compute resource; `name` matches exactly."""
    kept = [
        capability_view(request, catalog, loaded)
        for loaded in _resources(catalog)
        if (name is None or loaded.resource.name == name)
        and not not_modified(catalog.modified[loaded.id], modified_since)
    ]
    return kept[offset : offset + limit]


@router.get(
    "/capabilities/{capability_id}",
    operation_id="getCapability",
    response_model=Capability,
    response_model_exclude_none=True,
    summary="Get a single capability",
    responses={304: {"description": "Not Modified"}},
)
async def get_capability(
    request: Request, capability_id: str, catalog: CatalogDep, modified_since: ModifiedSince = None
) -> Capability | Response:
    """One capability."""
    loaded = _capability(catalog, capability_id)
    if not_modified(catalog.modified[loaded.id], modified_since):
        return Response(status_code=304)
    return capability_view(request, catalog, loaded)


@router.get(
    "/projects",
    operation_id="getProjects",
    response_model=list[Project],
    response_model_exclude_none=True,
    summary="Get the projects of the current user",
)
async def get_projects(
    request: Request, catalog: CatalogDep, engine: EngineDep, principal: PrincipalDep
) -> list[Project]:
    """The projects of the caller's token, and those resources' project rules grant it."""
    granted = _granted(engine, catalog, principal)
    return [project_view(request, catalog, principal, p) for p in granted]


@router.get(
    "/projects/{project_id}",
    operation_id="getProject",
    response_model=Project,
    response_model_exclude_none=True,
    summary="Get a single project",
)
async def get_project(
    request: Request,
    project_id: str,
    catalog: CatalogDep,
    engine: EngineDep,
    principal: PrincipalDep,
) -> Project:
    """One of the caller's projects."""
    _project(engine, catalog, principal, project_id)
    return project_view(request, catalog, principal, project_id)


@router.get(
    "/projects/{project_id}/project_allocations",
    operation_id="getProjectAllocationsByProject",
    response_model=list[ProjectAllocation],
    response_model_exclude_none=True,
    summary="Get the allocations of the current user's projects",
)
async def get_project_allocations(
    request: Request,
    project_id: str,
    catalog: CatalogDep,
    engine: EngineDep,
    principal: PrincipalDep,
) -> list[ProjectAllocation]:
    """One allocation per compute resource the project may be charged on, limits unknown."""
    resources = _project(engine, catalog, principal, project_id)
    return [allocation_view(request, project_id, loaded) for loaded in resources]


@router.get(
    "/projects/{project_id}/project_allocations/{project_allocation_id}",
    operation_id="getProjectAllocationByProject",
    response_model=ProjectAllocation,
    response_model_exclude_none=True,
    summary="Get a single project allocation",
)
async def get_project_allocation(
    request: Request,
    project_id: str,
    project_allocation_id: str,
    catalog: CatalogDep,
    engine: EngineDep,
    principal: PrincipalDep,
) -> ProjectAllocation:
    """One allocation of one of the caller's projects."""
    resources = _project(engine, catalog, principal, project_id)
    loaded = _allocation(resources, project_id, project_allocation_id)
    return allocation_view(request, project_id, loaded)


@router.get(
    "/projects/{project_id}/project_allocations/{project_allocation_id}/user_allocations",
    operation_id="getUserAllocationsByProjectAllocation",
    response_model=list[UserAllocation],
    response_model_exclude_none=True,
    summary="Get the user allocations of the current user's projects",
)
async def get_user_allocations(
    request: Request,
    project_id: str,
    project_allocation_id: str,
    catalog: CatalogDep,
    engine: EngineDep,
    principal: PrincipalDep,
) -> list[UserAllocation]:
    """The caller's own share: the only user allocation the gateway knows."""
    resources = _project(engine, catalog, principal, project_id)
    loaded = _allocation(resources, project_id, project_allocation_id)
    return [user_allocation_view(request, principal, project_id, loaded)]


@router.get(
    "/projects/{project_id}/project_allocations/{project_allocation_id}/user_allocations/"
    "{user_allocation_id}",
    operation_id="getUserAllocationByProjectAllocation",
    response_model=UserAllocation,
    response_model_exclude_none=True,
    summary="Get a user allocation of the current user's projects",
)
async def get_user_allocation(
    request: Request,
    project_id: str,
    project_allocation_id: str,
    user_allocation_id: str,
    catalog: CatalogDep,
    engine: EngineDep,
    principal: PrincipalDep,
) -> UserAllocation:
    """The caller's user allocation; anybody else's is 404."""
    resources = _project(engine, catalog, principal, project_id)
    loaded = _allocation(resources, project_id, project_allocation_id)
    view = user_allocation_view(request, principal, project_id, loaded)
    if view.id != user_allocation_id:
        raise ApiProblem(
            404,
            "Not Found",
            f"no user allocation {user_allocation_id!r} of "
            f"{principal.user!r} in {project_allocation_id!r}",
        )
    return view
