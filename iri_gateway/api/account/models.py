"""Official IRI Facility API v2 schemas of the `account` operations: capabilities, projects
and their allocations.

Field names, types and required fields follow `openapi/official/iri-facility-api-v2.openapi.yaml`.
"""

from __future__ import annotations

from datetime import datetime

from pydantic import Field

from iri_gateway.api.plumbing.official import AllocationUnit, Official


class Capability(Official):
    """Official `Capability`: an allocatable aspect of a resource."""

    id: str = Field(description="The unique identifier for the object")
    name: str | None = Field(default=None, description="The long name of the object")
    description: str | None = Field(default=None, description="Human-readable description")
    last_modified: datetime | None = Field(default=None, description="Last modification")
    units: list[AllocationUnit] = Field(description="Allocation units of this capability")
    self_uri: str = Field(description="The canonical URL of this object")


class AllocationEntry(Official):
    """Official `AllocationEntry`."""

    allocation: float = Field(description="Total allocation amount granted")
    usage: float = Field(description="Amount of allocation consumed")
    unit: AllocationUnit = Field(description="DOE IRI URN for the allocation unit")


class Project(Official):
    """Official `Project`."""

    id: str = Field(description="Unique identifier of the project")
    name: str = Field(description="Human-readable name of the project")
    description: str = Field(description="Detailed description of the project")
    user_ids: list[str] = Field(description="Users participating in the project")
    last_modified: datetime = Field(description="Last modification of the project")
    self_uri: str = Field(description="URI to this project resource")


class ProjectAllocation(Official):
    """Official `ProjectAllocation`: a project's allocation for a capability."""

    id: str = Field(description="Unique identifier of the project allocation")
    entries: list[AllocationEntry] = Field(description="Allocation entries: usage and limits")
    project_uri: str = Field(description="URI of the associated project")
    capability_uri: str = Field(description="URI of the associated capability")


class UserAllocation(Official):
    """Official `UserAllocation`: a user's piece of a project allocation."""

    id: str = Field(description="Unique identifier of the user allocation")
    user_id: str = Field(description="The user receiving this allocation")
    entries: list[AllocationEntry] = Field(description="Allocation entries: usage and limits")
    project_allocation_uri: str = Field(description="URI of the project allocation")
