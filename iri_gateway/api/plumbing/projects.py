"""The projects a caller may charge on a resource, as the API checks and lists them: the
token's own, and those the resource's project rules grant from the caller's claims (the
engine asks the resource's profile, `Resource.projects_of`); and what a refused caller is
told of them, which names the projects granted and how more are, never a rule's pattern."""

from __future__ import annotations

from iri_gateway.models.project_rules import ResourceProjects
from iri_gateway.service.accounts.auth import Principal
from iri_gateway.service.jobs.engine import Engine

RULES_HINT = (
    "this resource also grants projects from identity claims (its profile's project rules), "
    "which its administrators set"
)
"""What a caller refused on a resource with project rules is told of them (not the rules)."""


def projects_on(engine: Engine, principal: Principal, resource_id: str) -> ResourceProjects:
    """The projects `principal` may charge on `resource_id`."""
    return engine.projects(resource_id=resource_id, own=principal.projects, claims=principal.claims)


def refusal_hint(principal: Principal, granted: ResourceProjects) -> str:
    """The projects granted on the resource and how more are granted, for a refusal."""
    if granted.projects:
        said = f"granted: {', '.join(granted.projects)}"
    elif granted.by_rules:
        said = f"neither the token nor the project rules of {granted.resource} grant a project"
    else:
        said = "the token grants no project"
    hows = [how for how in (principal.grant_hint, RULES_HINT if granted.by_rules else "") if how]
    return "; ".join([said, *hows])
