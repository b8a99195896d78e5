"""The IRI `facility` operations: the gateway's facility and its sites (public, no token).

The gateway is one IRI facility, named by `settings.facility_name`. Each facility block of the
loaded profiles is one site; two profile files naming the same facility id are the same site.
`last_modified` of a site is the newest modification time of its profile files, as they were
when the gateway first served them (the catalog below is built once per application).
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, TypeVar

from fastapi import APIRouter, Depends, Query, Request, Response

from iri_gateway.api.facility.models import Facility, Site, StrictDateTime, link, utc_timestamp
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import SettingsDep
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import FacilityInfo
from iri_gateway.service.jobs.engine import Engine
from iri_gateway.service.operations.settings import Settings

router = APIRouter(prefix="/api/v2", tags=["facility"], route_class=CallerFirstRoute)

_T = TypeVar("_T")
_lock = threading.Lock()


def per_app(request: Request, key: str, build: Callable[[], _T]) -> _T:
    """The value `build()` gave the first time this application asked for `key`."""
    state = request.app.state
    with _lock:
        value: _T | None = getattr(state, key, None)
        if value is None:
            value = build()
            setattr(state, key, value)
        return value


@dataclass(frozen=True)
class SiteEntry:
    """One site: a facility block of the profiles and the resources under it."""

    info: FacilityInfo
    resources: tuple[LoadedResource, ...]
    modified: datetime

    @property
    def id(self) -> str:
        return self.info.id


@dataclass(frozen=True)
class Catalog:
    """What the facility, status and account views describe, fixed when first served."""

    sites: tuple[SiteEntry, ...]
    modified: dict[str, datetime]
    """Resource id -> modification time of its profile file."""
    started: datetime
    """When this application first served its catalog; declared outages are dated from it."""

    def site_of(self, resource_id: str) -> SiteEntry:
        return next(s for s in self.sites if any(r.id == resource_id for r in s.resources))

    def site(self, site_id: str) -> SiteEntry:
        for entry in self.sites:
            if entry.id == site_id:
                return entry
        known = ", ".join(s.id for s in self.sites)
        raise ApiProblem(404, "Not Found", f"no site {site_id!r}; sites: {known}")

    @property
    def last_modified(self) -> datetime:
        return max(s.modified for s in self.sites)


def _mtime(loaded: LoadedResource, fallback: datetime) -> datetime:
    try:
        return utc_timestamp(os.stat(loaded.source).st_mtime)
    except OSError:
        return fallback


def _build_catalog(request: Request) -> Catalog:
    started = datetime.now(UTC).replace(microsecond=0)
    grouped: dict[str, list[LoadedResource]] = {}
    engine: Engine = request.app.state.engine
    for loaded in engine.resources():
        grouped.setdefault(loaded.profile.facility.id, []).append(loaded)
    modified = {
        loaded.id: _mtime(loaded, started) for group in grouped.values() for loaded in group
    }
    sites = tuple(
        SiteEntry(
            info=group[0].profile.facility,
            resources=tuple(group),
            modified=max(modified[r.id] for r in group),
        )
        for group in grouped.values()
    )
    return Catalog(sites=sites, modified=modified, started=started)


async def get_catalog(request: Request) -> Catalog:
    """The application's catalog (async: after the first request it is a lookup)."""
    return per_app(request, "iri_catalog", lambda: _build_catalog(request))


CatalogDep = Annotated[Catalog, Depends(get_catalog)]
ModifiedSince = Annotated[StrictDateTime | None, Query(description="Only if modified after")]


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


def not_modified(last_modified: datetime, since: datetime | None) -> bool:
    return since is not None and last_modified <= since


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
