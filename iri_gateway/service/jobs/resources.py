"""The resources jobs run on: the loaded profiles' resources, accounts, projects, and
placement.

Answers from the profiles alone (no scheduler is asked), for the API's facility, status and
capability pages and for "where can this job run?".
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.placement import Placement
from iri_gateway.models.project_rules import ResourceProjects
from iri_gateway.planning.placement import place
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.operations.backends import NO_CLAIMS


class Resources:
    """The resources of the registry, each user's account and projects on them, and job
    placement."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    def resource(self, *, resource_id: str) -> LoadedResource:
        """The resource `resource_id`; UnknownResourceError lists the known ones."""
        return self.context.registry.get(resource_id)

    def account(
        self, *, resource_id: str, owner: str, claims: Mapping[str, Any] = NO_CLAIMS
    ) -> str:
        """The account the work of `owner` (whose identity says `claims`) uses on
        `resource_id` ('' for the gateway's own account); NoAccountError when the profile
        maps none."""
        return self.context.backends.account(self.resource(resource_id=resource_id), owner, claims)

    def projects(
        self,
        *,
        resource_id: str,
        own: Sequence[str],
        claims: Mapping[str, Any] = NO_CLAIMS,
    ) -> ResourceProjects:
        """The projects a caller may charge on `resource_id`: `own` (its token's), then
        those the resource's project rules grant from `claims` (`Resource.projects_of`)."""
        return self.resource(resource_id=resource_id).resource.projects_of(own, claims)

    def resources(self) -> list[LoadedResource]:
        """Every resource of the loaded profiles, in the order they were loaded."""
        return list(self.context.registry)

    def place(self, *, spec: JobSpec, owner: str | None = None) -> list[Placement]:
        """Every resource's answer to "can this job run here, and how?", best first; a job
        naming a template is expanded with `owner`'s templates first."""
        if spec.template is not None:
            spec = self.context.templates.expand(owner or "", spec).spec
        return place(spec, self.context.registry)
