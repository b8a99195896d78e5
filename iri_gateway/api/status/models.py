"""Official IRI Facility API v2 schemas of the `status` operations: resources, incidents, events.

Field names, types and required fields follow `openapi/official/iri-facility-api-v2.openapi.yaml`.
`Event.incident_uri`, which the official schema requires but allows to be null, is a plain
string here: the views always know it, and a `None` would vanish under
`response_model_exclude_none` and make the body invalid.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum

from pydantic import Field

from iri_gateway.api.plumbing.official import Named


class Status(StrEnum):
    """Official `Status` of a resource."""

    up = "up"
    down = "down"
    degraded = "degraded"
    unknown = "unknown"


class Endpoint(StrEnum):
    """Official `Endpoint`: the router a resource can be used with."""

    compute = "compute"
    filesystem = "filesystem"


class IncidentType(StrEnum):
    """Official `IncidentType`."""

    planned = "planned"
    unplanned = "unplanned"
    reservation = "reservation"


class Resolution(StrEnum):
    """Official `Resolution` of an incident."""

    unresolved = "unresolved"
    cancelled = "cancelled"
    completed = "completed"
    extended = "extended"
    pending = "pending"


class Resource(Named):
    """Official `Resource` (status)."""

    group: str | None = Field(default=None, description="Logical grouping of the resource")
    current_status: Status | None = Field(default=None, description="Current status")
    resource_type: str = Field(description="DOE IRI URN for the resource type")
    supported_endpoints: list[Endpoint] = Field(
        default_factory=list, description="Endpoints where this resource can be used"
    )
    self_uri: str = Field(description="The canonical URL of this object")
    site_uri: str = Field(description="URI of the site where this resource is located")
    capability_uris: list[str] = Field(description="The capabilities of this resource")


class Incident(Named):
    """Official `Incident`."""

    status: Status = Field(description="Current status of the incident")
    start: datetime = Field(description="Incident start time")
    end: datetime | None = Field(default=None, description="Incident end time")
    type: IncidentType = Field(description="Type of incident")
    resolution: Resolution = Field(description="Resolution status of the incident")
    self_uri: str = Field(description="The canonical URL of this object")
    event_uris: list[str] = Field(description="The past events of this incident")
    resource_uris: list[str] = Field(description="Resources that may be impacted")


class Event(Named):
    """Official `Event`."""

    occurred_at: datetime = Field(description="When the event occurred")
    status: Status = Field(description="Status of the resource at the time of the event")
    self_uri: str = Field(description="The canonical URL of this object")
    resource_uri: str = Field(description="The resource this event belongs to")
    incident_uri: str = Field(description="The event's incident")
