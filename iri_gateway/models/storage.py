"""The `storage` section of a resource's profile: where a user's data lives there, and how it
is reached from outside.

`locations` feed the official `getStorageLocations` (`StorageInstance`), `access_endpoints`
the official `getStorageAccessEndpoints` (`AccessEndpoint`). Paths are templates filled in
per caller: `{user}` (the gateway user), `{account}` (the account that runs the user's jobs),
`{account_initial}` (its first character) and `{project}` (each project the caller may
charge; a location naming `{project}` is one location per project). The vocabularies
(logical names, intents, protocols, capabilities) are the official spec's enums.
"""

from __future__ import annotations

import posixpath
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

LogicalName = Literal["home", "scratch", "project", "campaign", "archive", "shared", "temporary"]
"""Official `LogicalName`: the well-known filesystem tiers."""
StorageIntent = Literal["read", "write", "staging", "long-term-storage"]
"""Official `StorageIntent`: what the caller means to do with the locations."""
AccessProtocol = Literal["globus", "xrootd", "s3"]
AccessCapability = Literal["list", "read", "write", "transfer", "streaming"]

STORAGE_PLACEHOLDERS = ("{user}", "{account}", "{account_initial}", "{project}")
"""What a storage path template may contain besides literal text."""

Text = Annotated[str, Field(min_length=1, pattern=r"^[^\x00-\x1f\x7f]*$")]

_PROTOCOL_FIELDS: dict[str, tuple[str, ...]] = {
    "globus": ("endpoint_id", "uri", "root_path"),
    "xrootd": ("endpoint",),
    "s3": ("bucket", "region", "endpoint_url"),
}
_REQUIRED_FIELD = {"globus": "endpoint_id", "xrootd": "endpoint", "s3": "bucket"}


class _Strict(BaseModel):
    """Unknown keys and wrong types are errors, as everywhere in a profile."""

    model_config = ConfigDict(extra="forbid", strict=True)


def check_template(template: str) -> str:
    """`template` if it is an absolute path with only the storage placeholders in braces,
    no control characters and no '..'; the reason otherwise (as a ValueError)."""
    rest = template
    for placeholder in STORAGE_PLACEHOLDERS:
        rest = rest.replace(placeholder, "x")
    if "{" in rest or "}" in rest:
        raise ValueError(
            f"path {template!r}: only the placeholders "
            f"{', '.join(STORAGE_PLACEHOLDERS)} may appear in braces"
        )
    if any(ord(c) < 32 or ord(c) == 127 for c in template):
        raise ValueError(f"path {template!r} contains a control character")
    if not template.startswith("/"):
        raise ValueError(f"path {template!r} must be absolute (start with '/')")
    if ".." in template.split("/"):
        raise ValueError(f"path {template!r} must not contain '..'")
    return posixpath.normpath("/" + template.lstrip("/"))


class StorageAccess(_Strict):
    """POSIX-style permissions a user has on the location from this resource (from a job)."""

    read: bool = Field(default=True, description="Files there can be read")
    write: bool = Field(
        default=True,
        description="Files there can be written from a job; false: read-only there, left out "
        "by the `write` intent",
    )
    execute: bool = Field(default=True, description="Folders there can be traversed")


class StorageLocation(_Strict):
    """One storage tier as users of this resource see it."""

    logical_name: LogicalName = Field(
        description="Official logical tier: home, scratch, project, campaign, archive, shared "
        "or temporary. `archive` is left out by the `staging` intent and is all the "
        "`long-term-storage` intent returns",
    )
    path: str = Field(
        description="Absolute path template: `{user}`, `{account}`, `{account_initial}` and "
        "`{project}` are filled in per caller (a template with `{project}` gives one location "
        "per project the caller may charge); a value that is not one safe path component "
        "(no '/', not '.' or '..') leaves the location out for that caller",
    )
    filesystem: Text | None = Field(
        default=None, description="Filesystem type or label, e.g. 'lustre-scratch'"
    )
    performance_tier: Literal["high", "medium", "low", "tape"] | None = Field(
        default=None, description="Performance tier"
    )
    purge_policy_days: int | None = Field(
        default=None,
        ge=1,
        le=36500,
        description="Days of inactivity before files are purged; absent: no purge policy",
    )
    shared: bool = Field(
        default=False, description="True when the path is shared by several users or projects"
    )
    access: StorageAccess = Field(
        default_factory=StorageAccess, description="Permissions from this resource"
    )

    @field_validator("path")
    @classmethod
    def _template(cls, path: str) -> str:
        return check_template(path)


class AccessEndpointConfig(_Strict):
    """One way to move data in or out from outside (Globus, XRootD, S3)."""

    id: str = Field(
        pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$",
        max_length=128,
        description="Endpoint id, unique within the resource",
    )
    protocol: AccessProtocol = Field(description="globus, xrootd or s3")
    display_name: Text | None = Field(default=None, description="Human-readable name")
    auth_type: Text = Field(description="Authentication it needs, e.g. 'globus', 'x509'")
    capabilities: list[AccessCapability] = Field(
        min_length=1, description="Operations it supports: list, read, write, transfer, streaming"
    )
    endpoint_id: Text | None = Field(default=None, description="Globus endpoint UUID (globus)")
    uri: Text | None = Field(default=None, description="Full Globus URI (globus)")
    root_path: str | None = Field(
        default=None,
        description="Root path within the Globus endpoint (globus); a path template like "
        "`locations[].path` (without `{project}`), filled in per caller",
    )
    endpoint: Text | None = Field(default=None, description="XRootD server address (xrootd)")
    bucket: Text | None = Field(default=None, description="S3 bucket name (s3)")
    region: Text | None = Field(default=None, description="S3 region (s3)")
    endpoint_url: Text | None = Field(
        default=None, description="S3-compatible endpoint URL for non-AWS providers (s3)"
    )

    @field_validator("root_path")
    @classmethod
    def _root_template(cls, root_path: str | None) -> str | None:
        if root_path is not None and "{project}" in root_path:
            raise ValueError(
                f"root_path {root_path!r}: an endpoint has one root, so it "
                "cannot name {project}; use {user}, {account} or "
                "{account_initial}"
            )
        return None if root_path is None else check_template(root_path)

    @model_validator(mode="after")
    def _fields_of_protocol(self) -> AccessEndpointConfig:
        own = _PROTOCOL_FIELDS[self.protocol]
        foreign = sorted(
            field
            for fields in _PROTOCOL_FIELDS.values()
            for field in fields
            if field not in own and getattr(self, field) is not None
        )
        if foreign:
            raise ValueError(
                f"endpoint {self.id!r} ({self.protocol}): {', '.join(foreign)} belong to "
                f"another protocol; {self.protocol} takes {', '.join(own)}"
            )
        needed = _REQUIRED_FIELD[self.protocol]
        if getattr(self, needed) is None:
            raise ValueError(f"endpoint {self.id!r} ({self.protocol}) needs {needed}")
        return self


class Storage(_Strict):
    """Storage a resource's users have, and its data access endpoints (both optional)."""

    locations: list[StorageLocation] = Field(
        default_factory=list,
        description="Storage tiers users see from this resource (`getStorageLocations`)",
    )
    access_endpoints: list[AccessEndpointConfig] = Field(
        default_factory=list,
        description="Data access endpoints of this resource's storage "
        "(`getStorageAccessEndpoints`)",
    )

    @field_validator("access_endpoints")
    @classmethod
    def _unique_ids(cls, endpoints: list[AccessEndpointConfig]) -> list[AccessEndpointConfig]:
        ids = [e.id for e in endpoints]
        repeated = sorted({i for i in ids if ids.count(i) > 1})
        if repeated:
            raise ValueError(f"access endpoint ids repeat: {', '.join(repeated)}")
        return endpoints
