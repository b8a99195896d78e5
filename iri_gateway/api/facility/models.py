"""Official IRI Facility API v2 response schemas of the facility, status and account operations.

Field names, types and required fields follow `openapi/official/iri-facility-api-v2.openapi.yaml`.
Fields the official schemas require but allow to be null (`Site.operating_organization`,
`Event.incident_uri`) are plain strings here: the views always know them, and a `None` would
vanish under `response_model_exclude_none` and make the body invalid.

Also here: the `urn:doe-iri` vocabulary the views use, the strict date-time type of the
official `modified_since`/`from`/`to`/`time` query parameters, and `link()`, which builds the
canonical `*_uri` of an object from the request's base URL.
"""

from __future__ import annotations

from datetime import UTC, datetime
from enum import StrEnum
from typing import Annotated, Any
from urllib.parse import quote

from fastapi import Request
from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, StringConstraints

API = "api/v2"

# DOE-IRI URN registry values (registry of the iri-facility-api-docs project, v2.0).
COMPUTE_SYSTEM = "urn:doe-iri:resource:compute:system"
"""Resource type of a managed compute system (child of `urn:doe-iri:resource:compute`)."""
NODE_HOURS = "urn:doe-iri:allocation:compute:node-hours"
CAP_BATCH = "urn:doe-iri:compute:system-capability:batch-scheduling"
CAP_CONTAINERS = "urn:doe-iri:compute:system-capability:container-execution"
CAP_ACCELERATORS = "urn:doe-iri:compute:system-capability:accelerator-support"
COMPUTE_SYSTEM_PROFILE = "1.0.0"
"""`schema_version` of the Compute System attribute profile the attributes follow."""

_URN_NSS = r"(?:[A-Za-z0-9._~-]|%[0-9A-Fa-f]{2}|[!$&'()*+,;=@]|/)+"
ALLOCATION_UNIT_PATTERN = rf"^urn:doe-iri:allocation:{_URN_NSS}(?::{_URN_NSS})*$"
RESOURCE_TYPE_PATTERN = rf"^urn:doe-iri:[A-Za-z0-9][A-Za-z0-9-]{{0,31}}:{_URN_NSS}(?::{_URN_NSS})*$"
AllocationUnit = Annotated[str, StringConstraints(min_length=24, pattern=ALLOCATION_UNIT_PATTERN)]
ResourceType = Annotated[str, StringConstraints(min_length=15, pattern=RESOURCE_TYPE_PATTERN)]


def _strict_datetime(value: object) -> object:
    """ISO 8601 date and time (`2026-02-21T12:00:00Z`); no offset means UTC."""
    if isinstance(value, datetime):
        return value if value.tzinfo else value.replace(tzinfo=UTC)
    if not isinstance(value, str) or "T" not in value.upper():
        raise ValueError("expected an ISO 8601 date-time such as 2026-02-21T12:00:00Z")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("expected an ISO 8601 date-time such as 2026-02-21T12:00:00Z") from None
    return parsed if parsed.tzinfo else parsed.replace(tzinfo=UTC)


StrictDateTime = Annotated[datetime, BeforeValidator(_strict_datetime)]
"""Official query date-time: 'Strict ISO8601 datetime. Only valid ISO8601 datetime strings
are accepted.' (numbers and bare dates are refused)."""


def _strict_bool(value: object) -> object:
    """`true` or `false` (any case, surrounding blanks ignored), as the official reference
    implementation reads them; not `1`, `yes`, `on` or `t`, which pydantic would take."""
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in ("true", "false"):
        return value.strip().lower() == "true"
    raise ValueError("expected true or false")


StrictBool = Annotated[bool, BeforeValidator(_strict_bool)]
"""Official query boolean: 'Strict boolean. Only true/false allowed (bool or string).'"""


def utc_timestamp(seconds: float) -> datetime:
    """A POSIX time as an aware UTC datetime, to the second."""
    return datetime.fromtimestamp(int(seconds), UTC)


def link(request: Request, *parts: str) -> str:
    """Canonical URI of an object: the request's base URL, `api/v2`, then `parts` (each
    percent-encoded as one path segment)."""
    return str(request.base_url) + "/".join((API, *(quote(p, safe=":@") for p in parts)))


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


class _Official(BaseModel):
    """Every official object allows extra properties and optional `attributes`."""

    model_config = ConfigDict(extra="allow")

    attributes: dict[str, Any] | None = Field(
        default=None, description="Type-specific metadata; omitted when there is none"
    )


class _Named(_Official):
    """The official NamedObject fields."""

    id: str = Field(description="The unique identifier for the object")
    name: str | None = Field(default=None, description="The long name of the object")
    description: str | None = Field(default=None, description="Human-readable description")
    last_modified: datetime = Field(description="When this object was last modified")


class Facility(_Named):
    """Official `Facility`."""

    short_name: str | None = Field(default=None, description="Common or short name")
    organization_name: str | None = Field(default=None, description="Operating organization")
    support_uri: str | None = Field(default=None, description="Facility support portal")
    self_uri: str = Field(description="The canonical URL of this object")
    site_uris: list[str] = Field(description="URIs of associated Sites")


class Site(_Named):
    """Official `Site`."""

    short_name: str | None = Field(default=None, description="Common or short name")
    operating_organization: str = Field(description="Organization operating the Site")
    country_name: str | None = None
    locality_name: str | None = None
    state_or_province_name: str | None = None
    street_address: str | None = None
    unlocode: str | None = None
    altitude: float | None = None
    latitude: float | None = None
    longitude: float | None = None
    self_uri: str = Field(description="The canonical URL of this object")
    resource_uris: list[str] = Field(description="URIs of Resources hosted at this Site")


class Resource(_Named):
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


class Incident(_Named):
    """Official `Incident`."""

    status: Status = Field(description="Current status of the incident")
    start: datetime = Field(description="Incident start time")
    end: datetime | None = Field(default=None, description="Incident end time")
    type: IncidentType = Field(description="Type of incident")
    resolution: Resolution = Field(description="Resolution status of the incident")
    self_uri: str = Field(description="The canonical URL of this object")
    event_uris: list[str] = Field(description="The past events of this incident")
    resource_uris: list[str] = Field(description="Resources that may be impacted")


class Event(_Named):
    """Official `Event`."""

    occurred_at: datetime = Field(description="When the event occurred")
    status: Status = Field(description="Status of the resource at the time of the event")
    self_uri: str = Field(description="The canonical URL of this object")
    resource_uri: str = Field(description="The resource this event belongs to")
    incident_uri: str = Field(description="The event's incident")


class Capability(_Official):
    """Official `Capability`: an allocatable aspect of a resource."""

    id: str = Field(description="The unique identifier for the object")
    name: str | None = Field(default=None, description="The long name of the object")
    description: str | None = Field(default=None, description="Human-readable description")
    last_modified: datetime | None = Field(default=None, description="Last modification")
    units: list[AllocationUnit] = Field(description="Allocation units of this capability")
    self_uri: str = Field(description="The canonical URL of this object")


class AllocationEntry(_Official):
    """Official `AllocationEntry`."""

    allocation: float = Field(description="Total allocation amount granted")
    usage: float = Field(description="Amount of allocation consumed")
    unit: AllocationUnit = Field(description="DOE IRI URN for the allocation unit")


class Project(_Official):
    """Official `Project`."""

    id: str = Field(description="Unique identifier of the project")
    name: str = Field(description="Human-readable name of the project")
    description: str = Field(description="Detailed description of the project")
    user_ids: list[str] = Field(description="Users participating in the project")
    last_modified: datetime = Field(description="Last modification of the project")
    self_uri: str = Field(description="URI to this project resource")


class ProjectAllocation(_Official):
    """Official `ProjectAllocation`: a project's allocation for a capability."""

    id: str = Field(description="Unique identifier of the project allocation")
    entries: list[AllocationEntry] = Field(description="Allocation entries: usage and limits")
    project_uri: str = Field(description="URI of the associated project")
    capability_uri: str = Field(description="URI of the associated capability")


class UserAllocation(_Official):
    """Official `UserAllocation`: a user's piece of a project allocation."""

    id: str = Field(description="Unique identifier of the user allocation")
    user_id: str = Field(description="The user receiving this allocation")
    entries: list[AllocationEntry] = Field(description="Allocation entries: usage and limits")
    project_allocation_uri: str = Field(description="URI of the project allocation")
