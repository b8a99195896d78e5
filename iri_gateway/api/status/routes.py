"""The IRI `status` operations: resources, incidents and events (public, no token).

Each profile resource is one `Resource` of type `urn:doe-iri:resource:compute:system`, with
the Compute System attribute profile (1.0.0) of the DOE-IRI URN registry: system capabilities
and configured node, core, GPU and memory counts.

A resource listed in `settings.outages` (declared down by the gateway's administrator) is
down, with one incident `outage-<resource id>` (type `planned`: a deliberate declaration;
resolution `unresolved`; no end) holding one event `outage-<resource id>-declared`. Every
other resource's `current_status` is what this replica's health probes found
(`service.resource_health`: all probes ok: up; scheduler or login node failing: down; a file
root failing: degraded; not probed yet: unknown), or up when the gateway does not probe
(setting `resource_health_interval` 0). The probes' words are in `/ready`'s details, not in
incidents. Outage ids naming no served resource are ignored. The gateway does not know when
a declared outage began, so incidents and events are dated from when this application first
served its catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Annotated

from fastapi import APIRouter, Query, Request

from iri_gateway.api.facility.catalog import Catalog, CatalogDep, not_modified
from iri_gateway.api.plumbing.caller_first import CallerFirstRoute
from iri_gateway.api.plumbing.deps import EngineDep, SettingsDep
from iri_gateway.api.plumbing.official import (
    CAP_ACCELERATORS,
    CAP_BATCH,
    CAP_CONTAINERS,
    COMPUTE_SYSTEM,
    COMPUTE_SYSTEM_PROFILE,
    NODE_HOURS,
    AllocationUnit,
    ResourceType,
    StrictDateTime,
    link,
)
from iri_gateway.api.plumbing.problems import ApiProblem
from iri_gateway.api.status.models import (
    Endpoint,
    Event,
    Incident,
    IncidentType,
    Resolution,
    Resource,
    Status,
)
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.service.operations.settings import Settings

router = APIRouter(prefix="/api/v2", tags=["status"], route_class=CallerFirstRoute)

Text = Annotated[str | None, Query(min_length=1)]
Offset = Annotated[int, Query(ge=0)]
Limit = Annotated[int, Query(ge=0, le=1000)]
When = Annotated[StrictDateTime | None, Query()]


def outage_id(resource_id: str) -> str:
    return f"outage-{resource_id}"


def declared_down(settings: Settings, catalog: Catalog) -> list[str]:
    """Resource ids declared down that this gateway serves, in the settings' order."""
    served = {r.id for s in catalog.sites for r in s.resources}
    return [rid for rid in dict.fromkeys(settings.outages) if rid in served]


def _attributes(loaded: LoadedResource) -> dict[str, object]:
    """Compute System attribute profile 1.0.0 (configured capacity, not current availability)."""
    resource = loaded.resource
    nodes = resource.nodes
    capabilities = []
    if resource.scheduler.facts.batch_queue:
        capabilities.append(CAP_BATCH)
    if resource.runtimes.available():
        capabilities.append(CAP_CONTAINERS)
    if nodes.gpus is not None:
        capabilities.append(CAP_ACCELERATORS)
    return {
        "schema_version": COMPUTE_SYSTEM_PROFILE,
        "system_capabilities": capabilities,
        "configured_node_count": nodes.count,
        "configured_cpu_core_count": nodes.count * nodes.cpu.cores,
        "configured_gpu_count": nodes.count * (nodes.gpus.count if nodes.gpus else 0),
        "configured_memory_gib": int(nodes.count * nodes.memory_gib),
    }


def _endpoints(request: Request) -> list[Endpoint]:
    """`compute` always; `filesystem` when this application serves the filesystem routes."""
    # From the OpenAPI document (built once, then cached by FastAPI): `app.routes` no longer
    # lists the paths of included routers in recent FastAPI releases.
    paths = list(request.app.openapi().get("paths", {}))
    served = [Endpoint.compute]
    if any(p.startswith("/api/v2/filesystem/") and "{resource_id}" in p for p in paths):
        served.append(Endpoint.filesystem)
    return served


def _probed(request: Request, resource_id: str) -> tuple[Status, datetime | None]:
    """The status the health probes found, and since when (up, None: not probed)."""
    health = request.app.state.engine.resource_health
    condition = health.condition(resource_id)
    if condition is None:
        return Status.up, None
    since = health.since(resource_id)
    return Status(condition), None if since is None else datetime.fromtimestamp(since, UTC)


def resource_view(
    request: Request, settings: Settings, catalog: Catalog, loaded: LoadedResource
) -> Resource:
    """The official Resource of one profile resource."""
    down = loaded.id in declared_down(settings, catalog)
    modified = catalog.modified[loaded.id]
    site = catalog.site_of(loaded.id)
    status, since = _probed(request, loaded.id)
    if down:
        status, modified = Status.down, max(modified, catalog.started)
    elif since is not None:
        modified = max(modified, since)
    return Resource(
        id=loaded.id,
        name=loaded.resource.name,
        description=loaded.resource.description or None,
        last_modified=modified,
        group=site.id,
        current_status=status,
        resource_type=COMPUTE_SYSTEM,
        supported_endpoints=_endpoints(request),
        self_uri=link(request, "status", "resources", loaded.id),
        site_uri=link(request, "facility", "sites", site.id),
        capability_uris=[link(request, "account", "capabilities", loaded.id)],
        attributes=_attributes(loaded),
    )


@dataclass(frozen=True)
class _Outage:
    resource_id: str
    since: datetime

    @property
    def incident_id(self) -> str:
        return outage_id(self.resource_id)

    @property
    def event_id(self) -> str:
        return f"{self.incident_id}-declared"


def _outages(settings: Settings, catalog: Catalog) -> list[_Outage]:
    return [_Outage(rid, catalog.started) for rid in declared_down(settings, catalog)]


def incident_view(request: Request, outage: _Outage) -> Incident:
    return Incident(
        id=outage.incident_id,
        name=f"{outage.resource_id} declared down",
        description=f"The gateway's administrator declared {outage.resource_id} down "
        "(setting `outages`); no reason or end time was given.",
        last_modified=outage.since,
        status=Status.down,
        start=outage.since,
        type=IncidentType.planned,
        resolution=Resolution.unresolved,
        self_uri=link(request, "status", "incidents", outage.incident_id),
        event_uris=[link(request, "status", "events", outage.event_id)],
        resource_uris=[link(request, "status", "resources", outage.resource_id)],
    )


def event_view(request: Request, outage: _Outage) -> Event:
    return Event(
        id=outage.event_id,
        name=f"{outage.resource_id} declared down",
        description="Declared down by the gateway's administrator",
        last_modified=outage.since,
        occurred_at=outage.since,
        status=Status.down,
        self_uri=link(request, "status", "events", outage.event_id),
        resource_uri=link(request, "status", "resources", outage.resource_id),
        incident_uri=link(request, "status", "incidents", outage.incident_id),
    )


def _contains(text: str | None, part: str | None) -> bool:
    return part is None or (text is not None and part.lower() in text.lower())


@router.get(
    "/status/resources",
    operation_id="getResources",
    response_model=list[Resource],
    response_model_exclude_none=True,
    summary="Get all resources",
)
async def get_resources(
    request: Request,
    settings: SettingsDep,
    catalog: CatalogDep,
    name: Text = None,
    description: Text = None,
    group: Text = None,
    offset: Offset = 0,
    limit: Limit = 100,
    modified_since: When = None,
    resource_type: Annotated[ResourceType | None, Query()] = None,
    current_status: Annotated[Status | None, Query()] = None,
    capability: Annotated[list[AllocationUnit] | None, Query(min_length=1)] = None,
) -> list[Resource]:
    """Every resource, filtered: `name` and `group` match exactly, `description` as a
    case-insensitive substring, `resource_type` by URN prefix, `capability` keeps resources
    with a capability in any of the given allocation units."""
    resources = [
        resource_view(request, settings, catalog, loaded)
        for site in catalog.sites
        for loaded in site.resources
    ]
    kept = [
        r
        for r in resources
        if (name is None or r.name == name)
        and _contains(r.description, description)
        and (group is None or r.group == group)
        and not not_modified(r.last_modified, modified_since)
        and (
            resource_type is None
            or r.resource_type == resource_type
            or r.resource_type.startswith(resource_type + ":")
        )
        and (current_status is None or r.current_status == current_status)
        and (capability is None or NODE_HOURS in capability)
    ]
    return kept[offset : offset + limit]


@router.get(
    "/status/resources/{resource_id}",
    operation_id="getResource",
    response_model=Resource,
    response_model_exclude_none=True,
    summary="Get a specific resource",
)
async def get_resource(
    request: Request,
    resource_id: str,
    engine: EngineDep,
    settings: SettingsDep,
    catalog: CatalogDep,
) -> Resource:
    """One resource; 404 lists the known ones."""
    return resource_view(request, settings, catalog, engine.resource(resource_id=resource_id))


def _active(
    start: datetime, end: datetime | None, first: datetime | None, last: datetime | None
) -> bool:
    """True when [start, end] (end None: ongoing) overlaps [first, last]."""
    return (last is None or start <= last) and (first is None or end is None or end >= first)


@router.get(
    "/status/incidents",
    operation_id="getIncidents",
    response_model=list[Incident],
    response_model_exclude_none=True,
    summary="Get all incidents without their events",
)
async def get_incidents(
    request: Request,
    settings: SettingsDep,
    catalog: CatalogDep,
    name: Text = None,
    description: Text = None,
    status: Annotated[Status | None, Query()] = None,
    type_: Annotated[IncidentType | None, Query(alias="type")] = None,
    from_: Annotated[StrictDateTime | None, Query(alias="from")] = None,
    time: When = None,
    to: When = None,
    modified_since: When = None,
    resource_id: Text = None,
    offset: Offset = 0,
    limit: Limit = 100,
    resolution: Annotated[Resolution | None, Query()] = None,
) -> list[Incident]:
    """One incident per declared outage; `from`/`to` keep incidents overlapping that window,
    `time` those ongoing at that instant."""
    kept = [
        incident_view(request, o)
        for o in _outages(settings, catalog)
        if resource_id is None or o.resource_id == resource_id
    ]
    kept = [
        i
        for i in kept
        if (name is None or i.name == name)
        and _contains(i.description, description)
        and (status is None or i.status == status)
        and (type_ is None or i.type == type_)
        and (resolution is None or i.resolution == resolution)
        and _active(i.start, i.end, from_, to)
        and _active(i.start, i.end, time, time)
        and not not_modified(i.last_modified, modified_since)
    ]
    return kept[offset : offset + limit]


@router.get(
    "/status/incidents/{incident_id}",
    operation_id="getIncident",
    response_model=Incident,
    response_model_exclude_none=True,
    summary="Get a specific incident and its events",
)
async def get_incident(
    request: Request, incident_id: str, settings: SettingsDep, catalog: CatalogDep
) -> Incident:
    """One incident; its events are linked by `event_uris`."""
    for outage in _outages(settings, catalog):
        if outage.incident_id == incident_id:
            return incident_view(request, outage)
    raise ApiProblem(404, "Not Found", f"no incident {incident_id!r}")


@router.get(
    "/status/events",
    operation_id="getEventsByIncident",
    response_model=list[Event],
    response_model_exclude_none=True,
    summary="Get all events",
)
async def get_events(
    request: Request,
    settings: SettingsDep,
    catalog: CatalogDep,
    incident_id: Text = None,
    resource_id: Text = None,
    name: Text = None,
    description: Text = None,
    status: Annotated[Status | None, Query()] = None,
    from_: Annotated[StrictDateTime | None, Query(alias="from")] = None,
    time: When = None,
    to: When = None,
    modified_since: When = None,
    offset: Offset = 0,
    limit: Limit = 100,
) -> list[Event]:
    """Events, filtered; `from`/`to` bound `occurred_at`, `time` keeps the events that had
    occurred by that instant."""
    kept = [
        event_view(request, o)
        for o in _outages(settings, catalog)
        if (incident_id is None or o.incident_id == incident_id)
        and (resource_id is None or o.resource_id == resource_id)
    ]
    kept = [
        e
        for e in kept
        if (name is None or e.name == name)
        and _contains(e.description, description)
        and (status is None or e.status == status)
        and (from_ is None or e.occurred_at >= from_)
        and (to is None or e.occurred_at <= to)
        and (time is None or e.occurred_at <= time)
        and not not_modified(e.last_modified, modified_since)
    ]
    return kept[offset : offset + limit]


@router.get(
    "/status/events/{event_id}",
    operation_id="getEventByIncident",
    response_model=Event,
    response_model_exclude_none=True,
    summary="Get a specific event",
)
async def get_event(
    request: Request, event_id: str, settings: SettingsDep, catalog: CatalogDep
) -> Event:
    """One event."""
    for outage in _outages(settings, catalog):
        if outage.event_id == event_id:
            return event_view(request, outage)
    raise ApiProblem(404, "Not Found", f"no event {event_id!r}")
