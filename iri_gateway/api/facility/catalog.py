"""The catalog the facility, status and account views describe: sites and their resources.

Built once per application, when first served: each facility block of the loaded profiles is
one site (two profile files naming the same facility id are the same site), and the
`last_modified` of a site or resource is the modification time of its profile files as they
were then. Also here: the conditional-GET vocabulary of those views (`ModifiedSince`,
`not_modified`) and `per_app`, the once-per-application value the catalog is kept with.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated, TypeVar

from fastapi import Depends, Query, Request

from iri_gateway.api.plumbing.official import StrictDateTime, utc_timestamp
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import FacilityInfo
from iri_gateway.service.jobs.engine import Engine

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


def not_modified(last_modified: datetime, since: datetime | None) -> bool:
    """Whether an object last modified at `last_modified` is unchanged since `since` (the
    caller's `modified_since`): a single object is then a 304, a list leaves it out."""
    return since is not None and last_modified <= since
