"""Official IRI Facility API v2 response schemas of the storage operations: `StorageInstance`
(with `AccessPermissions`) and `AccessEndpoint`, field for field as the official spec has
them; the vocabularies are the profile's (`models.storage`), which are the spec's enums."""

from __future__ import annotations

from pydantic import BaseModel, Field

from iri_gateway.models.storage import (
    AccessCapability,
    AccessEndpointConfig,
    AccessProtocol,
    LogicalName,
    StorageLocation,
)


class AccessPermissions(BaseModel):
    """Official `AccessPermissions`: POSIX-style permissions on a storage location."""

    read: bool = Field(description="Read permission")
    write: bool = Field(description="Write permission")
    execute: bool = Field(description="Execute/traverse permission")


class StorageInstance(BaseModel):
    """Official `StorageInstance`: one storage tier resolved for the caller."""

    logical_name: LogicalName = Field(description="Logical filesystem tier name")
    path: str = Field(description="Absolute resolved path for this user at the resource")
    filesystem: str | None = Field(default=None, description="Underlying filesystem type or label")
    performance_tier: str | None = Field(default=None, description="Performance tier")
    purge_policy_days: int | None = Field(
        default=None, description="Days of inactivity before purge; absent: no purge policy"
    )
    shared: bool = Field(default=False, description="Shared by several users or projects")
    access: AccessPermissions = Field(description="Permissions through this resource")

    @classmethod
    def of(cls, location: StorageLocation) -> StorageInstance:
        """The official view of a filled-in profile location."""
        return cls.model_validate(location.model_dump())


class AccessEndpoint(BaseModel):
    """Official `AccessEndpoint`; protocol-specific fields only for their protocol."""

    id: str = Field(description="Unique identifier for this access endpoint")
    resource_id: str = Field(description="ID of the resource this endpoint belongs to")
    protocol: AccessProtocol = Field(description="Data access protocol")
    display_name: str | None = Field(default=None, description="Human-readable name")
    auth_type: str = Field(description="Authentication mechanism required")
    capabilities: list[AccessCapability] = Field(description="Supported data operations")
    endpoint_id: str | None = Field(default=None, description="Globus endpoint UUID")
    uri: str | None = Field(default=None, description="Full Globus URI")
    root_path: str | None = Field(default=None, description="Root path within the endpoint")
    endpoint: str | None = Field(default=None, description="XRootD server address")
    bucket: str | None = Field(default=None, description="S3 bucket name")
    region: str | None = Field(default=None, description="S3 region")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint URL")

    @classmethod
    def of(cls, resource_id: str, endpoint: AccessEndpointConfig) -> AccessEndpoint:
        """The official view of a profile endpoint of resource `resource_id`."""
        return cls.model_validate({**endpoint.model_dump(), "resource_id": resource_id})
