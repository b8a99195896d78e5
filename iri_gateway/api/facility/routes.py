"""The IRI `facility` operations: the gateway's facility and its sites (public, no token).

The gateway is one IRI facility, named by `settings.facility_name`; its sites and their
`last_modified` are the catalog's (`catalog.py`, built once per application).
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query, Request, Response

from iri_gateway.api.facility.catalog import (
    Catalog,
    CatalogDep,
    ModifiedSince,
    SiteEntry,
    not_modified,
)
from iri_gateway.api.facility.models import Facility, Site
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import SettingsDep
from iri_gateway.api.plumbing.official import link
from iri_gateway.service.operations.settings import Settings

router = APIRouter(prefix="/api/v2", tags=["facility"], route_class=CallerFirstRoute)


def site_view(request: Request, entry: SiteEntry) -> Site:
    """The official Site of one facility block."""
    info = entry.info
    attributes: dict[str, object] = {}
    if info.url:
        attributes["url"] = info.url
    if info.example:
        attributes["example_profile"] = True
        attributes["sources"] = list(info.sources)
    return Site(
        id=info.id,
        name=info.name,
        description=info.description or None,
        last_modified=entry.modified,
        operating_organization=info.name,
        self_uri=link(request, "facility", "sites", info.id),
        resource_uris=[link(request, "status", "resources", r.id) for r in entry.resources],
        attributes=attributes or None,
    )


def facility_view(request: Request, settings: Settings, catalog: Catalog) -> Facility:
    """The official Facility: the gateway itself, over every site of its profiles."""
    names = ", ".join(s.info.name for s in catalog.sites)
    return Facility(
        id=settings.facility_name,
        name=settings.facility_name,
        description=f"iri-gateway serving the resources of: {names}",
        last_modified=catalog.last_modified,
        self_uri=link(request, "facility"),
        site_uris=[link(request, "facility", "sites", s.id) for s in catalog.sites],
    )


@router.get(
    "/facility",
    operation_id="getFacility",
    response_model=Facility,
    response_model_exclude_none=True,
    summary="Get Facility",
    responses={304: {"description": "Not Modified"}},
)
async def get_facility(
    request: Request,
    settings: SettingsDep,
    catalog: CatalogDep,
    modified_since: ModifiedSince = None,
) -> Facility | Response:
    """Get facility information: the gateway and the sites of its profiles."""
    if not_modified(catalog.last_modified, modified_since):
        return Response(status_code=304)
    return facility_view(request, settings, catalog)


@router.get(
    "/facility/sites",
    operation_id="getSites",
    response_model=list[Site],
    response_model_exclude_none=True,
    summary="List Sites",
)
async def get_sites(
    request: Request,
    catalog: CatalogDep,
    modified_since: ModifiedSince = None,
    name: Annotated[str | None, Query(min_length=1)] = None,
    offset: Annotated[int, Query(ge=0)] = 0,
    limit: Annotated[int, Query(ge=0, le=1000)] = 100,
    short_name: Annotated[str | None, Query(min_length=1)] = None,
) -> list[Site]:
    """List sites; `name` matches exactly; sites have no short name, so `short_name` matches
    none."""
    sites = [
        site_view(request, s) for s in catalog.sites if not not_modified(s.modified, modified_since)
    ]
    if name is not None:
        sites = [s for s in sites if s.name == name]
    if short_name is not None:
        sites = [s for s in sites if s.short_name == short_name]
    return sites[offset : offset + limit]


@router.get(
    "/facility/sites/{site_id}",
    operation_id="getSite",
    response_model=Site,
    response_model_exclude_none=True,
    summary="Get Site",
    responses={304: {"description": "Not Modified"}},
)
async def get_site(
    request: Request, site_id: str, catalog: CatalogDep, modified_since: ModifiedSince = None
) -> Site | Response:
    """Get site by ID."""
    entry = catalog.site(site_id)
    if not_modified(entry.modified, modified_since):
        return Response(status_code=304)
    return site_view(request, entry)
