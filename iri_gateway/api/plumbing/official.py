"""The IRI Facility API v2 vocabulary every area's schemas and views share.

- `Official` and `Named`: the fields every official object has (extra properties allowed,
  optional `attributes`; NamedObject's id, name, description, last_modified);
- the `urn:doe-iri` values of the DOE-IRI URN registry the views use, and the URN types;
- the strict date-time and boolean of the official query parameters (`modified_since`,
  `from`, `to`, `time`; boolean flags), which refuse what pydantic alone would take;
- `link()`, the canonical `*_uri` of an object, from the request's base URL.

Field names, types and required fields follow `openapi/official/iri-facility-api-v2.openapi.yaml`.
Each area's own schemas are in its `models.py` (facility, status, account).
"""

from __future__ import annotations

from datetime import UTC, datetime
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


class Official(BaseModel):
    """Every official object allows extra properties and optional `attributes`."""

    model_config = ConfigDict(extra="allow")

    attributes: dict[str, Any] | None = Field(
        default=None, description="Type-specific metadata; omitted when there is none"
    )


class Named(Official):
    """The official NamedObject fields."""

    id: str = Field(description="The unique identifier for the object")
    name: str | None = Field(default=None, description="The long name of the object")
    description: str | None = Field(default=None, description="Human-readable description")
    last_modified: datetime = Field(description="When this object was last modified")
