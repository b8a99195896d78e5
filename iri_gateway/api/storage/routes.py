"""The official `storage` operations (token needed): `getStorageLocations` and
`getStorageAccessEndpoints`, from the resource profile's `storage` section.

Locations are filled in for the caller (`service.storage`): their user name, the account
that runs their jobs on the resource (the mapped login account over SSH; a user without one
is refused with 403, as everywhere), and, for project-scoped paths, each project they may
charge there (their token's, and those the resource's `project_rules` grant from their
claims). `project` (or `allocation`, `<project>:<resource>` as the account operations name
allocations) must be one of the caller's: any other is 404, as in the account operations.
"""

from __future__ import annotations

from typing import Annotated, Any

from fastapi import APIRouter, Query

from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, PrincipalDep
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.plumbing.projects import projects_on
from iri_gateway.api.storage.models import AccessEndpoint, StorageInstance
from iri_gateway.models.storage import AccessProtocol, LogicalName, StorageIntent
from iri_gateway.models.storage import Storage as StorageSection
from iri_gateway.service.accounts import storage
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.jobs.engine import Engine

router = APIRouter(prefix="/api/v2/storage", tags=["storage"], route_class=CallerFirstRoute)

_RESPONSES: dict[int | str, dict[str, Any]] = {
    401: {"description": "No token, or one the gateway does not know"},
    403: {"description": "The caller has no account on the resource (the profile maps none)"},
    404: {
        "description": "No such resource (the problem lists the known ones), or a project "
        "or allocation that is not the caller's"
    },
}
Name = Annotated[str | None, Query()]
"""A filter value: any string, as the official spec has it (one matching nothing finds
nothing, or is 404 where it must name something of the caller's)."""


def _scope(
    engine: Engine, principal: Principal, resource_id: str
) -> tuple[storage.Caller, StorageSection]:
    """The caller as the storage templates fill them in (their account on the resource: 403
    when the profile maps none; the projects they may charge there), and the resource's
    `storage` section (404 when unknown)."""
    account = (
        engine.account(resource_id=resource_id, owner=principal.user, claims=principal.claims)
        or principal.user
    )
    projects = projects_on(engine, principal, resource_id).projects
    caller = storage.Caller(user=principal.user, account=account, projects=projects)
    return caller, engine.resource(resource_id=resource_id).resource.storage


def _project(
    caller: storage.Caller, resource_id: str, project: str | None, allocation: str | None
) -> str | None:
    """The project the caller filters by (from `project` or `allocation`), checked."""
    field, chosen = "project", project
    if allocation is not None:
        named, _, on = allocation.rpartition(":")
        if on != resource_id or not named or (project is not None and named != project):
            raise ApiProblem(
                404,
                "Not Found",
                f"no allocation {allocation!r} on "
                f"{resource_id!r}: allocations here are named "
                f"'<project>:{resource_id}'",
                [{"name": "allocation", "reason": "not an allocation here"}],
            )
        field, chosen = "allocation", named
    if chosen is not None and chosen not in caller.projects:
        yours = ", ".join(caller.projects) or "none"
        raise ApiProblem(
            404,
            "Not Found",
            f"no project {chosen!r} among yours ({yours})",
            [{"name": field, "reason": "not one of your projects"}],
        )
    return chosen


@router.get(
    "/locations/{resource_id}",
    operation_id="getStorageLocations",
    response_model=list[StorageInstance],
    response_model_exclude_none=True,
    responses=_RESPONSES,
    summary="Get resolved storage locations for a resource",
)
async def get_storage_locations(
    resource_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    logicalpath: Annotated[LogicalName | None, Query()] = None,
    project: Name = None,
    allocation: Name = None,
    intent: Annotated[StorageIntent | None, Query()] = None,
) -> list[StorageInstance]:
    """The caller's storage paths at the resource, from the profile's `storage.locations`.
    Intents: `staging` leaves out archive, `long-term-storage` keeps only archive, `write`
    leaves out locations read-only from a job, `read` keeps all."""
    caller, section = _scope(engine, principal, resource_id)
    chosen = _project(caller, resource_id, project, allocation)
    found = storage.locations(
        section, caller, logical_name=logicalpath, project=chosen, intent=intent
    )
    return [StorageInstance.of(location) for location in found]


@router.get(
    "/access-endpoints/{resource_id}",
    operation_id="getStorageAccessEndpoints",
    response_model=list[AccessEndpoint],
    response_model_exclude_none=True,
    responses=_RESPONSES,
    summary="Get data access endpoints for a storage resource",
)
async def get_storage_access_endpoints(
    resource_id: str,
    engine: EngineDep,
    principal: PrincipalDep,
    protocol: Annotated[AccessProtocol | None, Query()] = None,
    endpoint_id: Name = None,
) -> list[AccessEndpoint]:
    """The resource's data access endpoints (Globus, XRootD, S3) from the profile's
    `storage.access_endpoints`; protocol-specific fields only for their protocol."""
    caller, section = _scope(engine, principal, resource_id)
    found = storage.access_endpoints(section, caller, protocol=protocol, endpoint_id=endpoint_id)
    return [AccessEndpoint.of(resource_id, endpoint) for endpoint in found]
