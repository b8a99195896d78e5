"""A resource as the gateway holds it once loaded: with its profile, file and derived facts.

Kept apart from `models.profile` (what an admin writes) so the profile models do not depend
on the code that derives hardware facts from them: profile <- facts <- loaded_resource.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from types import MappingProxyType
from typing import Any

from iri_gateway.models.facts import hardware_facts
from iri_gateway.models.profile import FacilityProfile, Resource


@dataclass(frozen=True)
class LoadedResource:
    """A resource together with the profile and file it came from."""

    profile: FacilityProfile
    resource: Resource
    source: Path
    templates_dir: Path | None
    detected: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    """Facts measured on this machine at start (`nodes.detect`), by name; the resource's nodes
    already hold them, and `cdi_devices`, which no profile field holds, is added from here."""

    @property
    def id(self) -> str:
        return self.resource.id

    @cached_property
    def facts(self) -> Mapping[str, Any]:
        """The resource's hardware facts, derived once (see `iri_gateway.models.facts`)."""
        return MappingProxyType({**hardware_facts(self.resource), **self.detected})
