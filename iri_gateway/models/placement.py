"""The answer to "where can this job run?": one resource's verdict, as the API returns it.

A model on its own (the ranking code is `planning.placement`) so the SDK and the CLI views
read placements without importing the negotiation code.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from iri_gateway.models.jobspec import AppRef
from iri_gateway.models.plan import FlavourOutcome


class PlacementProblem(BaseModel):
    """One reason a resource cannot run the job."""

    name: str = Field(description="JSON path of the field at fault")
    reason: str = Field(description="Why")
    offered: str | None = Field(description="What the resource offers instead, if anything")


class Placement(BaseModel):
    """One resource's answer for the job."""

    resource: str = Field(description="Resource id")
    facility: str = Field(description="Facility id")
    runnable: bool = Field(description="Whether the job can run there")
    app: AppRef | None = Field(
        default=None, description="The app and version of the image (container.app), if named"
    )
    flavour: str | None = Field(description="The image flavour that would be used")
    priority: int | None = Field(description="That flavour's priority")
    runtime: str | None = Field(description="Container runtime that would be used")
    queue: str | None = Field(description="Queue or partition that would be used")
    image: str | None = Field(description="Image reference as the runtime would receive it")
    flavours: list[FlavourOutcome] = Field(
        description="Every flavour of the job with what became of it on this resource"
    )
    role_flavours: dict[str, str | None] = Field(
        default_factory=dict,
        description="For a job with roles: each role's image flavour there (null: its image)",
    )
    warnings: list[str] = Field(description="Things to know when it runs there")
    problems: list[PlacementProblem] = Field(description="Why it cannot run there")
