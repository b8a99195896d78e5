"""Official IRI Facility API v2 schemas of the `facility` operations: `Facility` and `Site`.

Field names, types and required fields follow `openapi/official/iri-facility-api-v2.openapi.yaml`.
`Site.operating_organization`, which the official schema requires but allows to be null, is a
plain string here: the views always know it, and a `None` would vanish under
`response_model_exclude_none` and make the body invalid.
"""

from __future__ import annotations

from pydantic import Field

from iri_gateway.api.plumbing.official import Named


class Facility(Named):
    """Official `Facility`."""

    short_name: str | None = Field(default=None, description="Common or short name")
    organization_name: str | None = Field(default=None, description="Operating organization")
    support_uri: str | None = Field(default=None, description="Facility support portal")
    self_uri: str = Field(description="The canonical URL of this object")
    site_uris: list[str] = Field(description="URIs of associated Sites")


class Site(Named):
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
