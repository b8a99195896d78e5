"""The official resource lists of the compute and filesystem routers (public, no token):
`getComputeResources` (`GET /compute/resources`) and `getFilesystemResources`
(`POST /filesystem/resources`, a POST in the official spec).

Both are the `Resource` objects `status` serves (`status.resource_view`), kept to those whose
`supported_endpoints` name the router: every profile resource runs jobs, and every one is
usable with the filesystem operations when this application serves them.
"""

from __future__ import annotations

from fastapi import APIRouter, Request

from iri_gateway.api.facility.catalog import Catalog, CatalogDep
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import SettingsDep
from iri_gateway.api.status.models import Endpoint, Resource
from iri_gateway.api.status.routes import resource_view
from iri_gateway.service.operations.settings import Settings

router = APIRouter(prefix="/api/v2", route_class=CallerFirstRoute)


def _usable_with(
    request: Request, settings: Settings, catalog: Catalog, endpoint: Endpoint
) -> list[Resource]:
    """Every profile resource whose `supported_endpoints` include `endpoint`."""
    views = [
        resource_view(request, settings, catalog, loaded)
        for site in catalog.sites
        for loaded in site.resources
    ]
    return [view for view in views if endpoint in view.supported_endpoints]


@router.get(
    "/compute/resources",
    operation_id="getComputeResources",
    tags=["compute"],
    response_model=list[Resource],
    response_model_exclude_none=True,
    summary="Get Resources",
)
async def get_compute_resources(
    request: Request, settings: SettingsDep, catalog: CatalogDep
) -> list[Resource]:
    """The resources jobs can be submitted to: every resource of the loaded profiles."""
    return _usable_with(request, settings, catalog, Endpoint.compute)


@router.post(
    "/filesystem/resources",
    operation_id="getFilesystemResources",
    tags=["filesystem"],
    response_model=list[Resource],
    response_model_exclude_none=True,
    summary="Post Resources",
)
async def get_filesystem_resources(
    request: Request, settings: SettingsDep, catalog: CatalogDep
) -> list[Resource]:
    """The resources the filesystem operations work on (a POST, as the official spec has
    it; it takes no body)."""
    return _usable_with(request, settings, catalog, Endpoint.filesystem)
