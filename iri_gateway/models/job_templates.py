"""Job templates (extension): named, stored parts of a JobSpec that a job refers to by name.

From the Backend.AI cluster-session proposal. A **task template** holds what one kind of
process needs (image, resources, environment, mounts, a bootstrap script, possibly the
program); a **cluster template** is built from task templates: its roles each name a task
template and the least and most members the role may have. A job names a template in its
`template` field and chooses, for a cluster template, the count of each role inside those
limits. Precedence of every field: image < template < job (`planning/job_templates.py`).

Users keep their own templates (the store, `service/jobs/job_templates.py`); a facility ships
some in its profile (`templates:`), read-only and visible to every user. A template body is held to
the JobSpec's size limits (`limits.py`).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, BeforeValidator, ConfigDict, Field, model_validator

from iri_gateway.models.job_template_names import TemplateName
from iri_gateway.models.jobspec import (
    ROLE_NAME,
    MemberCount,
    ResourceSpec,
    ServicePorts,
    VolumeMount,
)
from iri_gateway.models.limits import (
    MAX_ARGUMENT_LENGTH,
    MAX_ITEMS,
    Arguments,
    Environment,
    NonEmptyText,
    Text,
    unicode_text,
)


def _role_name(name: str) -> str:
    if not re.fullmatch(ROLE_NAME, name) or len(name) > 40:
        raise ValueError(
            f"{name!r}: role names are lower case letters, digits and '-', start with a letter "
            "and do not end in a digit (members are named worker1, worker2, ...)"
        )
    return name


MAX_BOOTSTRAP_LENGTH = MAX_ARGUMENT_LENGTH - 64
"""Characters of a bootstrap script: it becomes one argument of the member's shell."""
Bootstrap = Annotated[
    str, Field(min_length=1, max_length=MAX_BOOTSTRAP_LENGTH), BeforeValidator(unicode_text)
]


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class TaskTemplate(_Strict):
    """What one kind of process needs; every field is optional and the job's own wins."""

    kind: Literal["task"] = Field(description="'task'")
    description: Text | None = Field(default=None, description="What the template is for")
    image: NonEmptyText | None = Field(default=None, description="The container image")
    executable: NonEmptyText | None = Field(
        default=None, description="The program; default: the job's, else the image's entrypoint"
    )
    arguments: Arguments | None = Field(
        default=None, description="The program's arguments (used with the executable)"
    )
    environment: Environment = Field(
        default_factory=dict, description="Environment variables; the job's override them"
    )
    volume_mounts: Annotated[list[VolumeMount], Field(max_length=MAX_ITEMS)] = Field(
        default_factory=list, description="Mounts; a job's mount of the same target wins"
    )
    resources: ResourceSpec | None = Field(
        default=None, description="Resources; each field the job sets wins"
    )
    ports: ServicePorts = Field(
        default_factory=dict,
        description="Service ports (name -> port) of a job without roles built on it; a "
        "job's port of the same name wins",
    )
    bootstrap: Bootstrap | None = Field(
        default=None,
        description="Shell commands run in each member (in its container) before its program, "
        "with /bin/sh; the program then replaces the shell (exec). Needs an executable, from "
        f"the template or the job; at most {MAX_BOOTSTRAP_LENGTH} characters.",
    )


class TemplateRole(_Strict):
    """One role of a cluster template: a task template and how many members it may have."""

    name: Annotated[str, BeforeValidator(unicode_text), AfterValidator(_role_name)] = Field(
        description="Role name, as in JobSpec roles (members are name1, name2, ...)",
        json_schema_extra={"pattern": ROLE_NAME},
    )
    task: TemplateName = Field(description="The task template the members run")
    min: MemberCount = Field(default=1, description="Fewest members a job may choose")
    max: MemberCount | None = Field(
        default=None, description="Most members a job may choose; default: min"
    )
    count: MemberCount | None = Field(
        default=None, description="Members when the job does not choose; default: min"
    )

    @model_validator(mode="after")
    def _in_order(self) -> TemplateRole:
        high = self.maximum
        if self.min > high:
            raise ValueError(f"role {self.name}: min {self.min} is above max {high}")
        if self.count is not None and not self.min <= self.count <= high:
            raise ValueError(
                f"role {self.name}: count {self.count} is outside min..max ({self.min}..{high})"
            )
        return self

    @property
    def maximum(self) -> int:
        return self.max if self.max is not None else self.min

    @property
    def default_count(self) -> int:
        return self.count if self.count is not None else self.min


class ClusterTemplate(_Strict):
    """A cluster built from task templates: its roles, in order (the first role's first
    member is the cluster's primary)."""

    kind: Literal["cluster"] = Field(description="'cluster'")
    description: Text | None = Field(default=None, description="What the template is for")
    roles: Annotated[list[TemplateRole], Field(min_length=1, max_length=MAX_ITEMS)] = Field(
        description="The roles, each from a task template, with its count limits"
    )

    @model_validator(mode="after")
    def _unique_roles(self) -> ClusterTemplate:
        names = [role.name for role in self.roles]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"role names must be unique; given twice: {', '.join(twice)}")
        return self


Template = Annotated[TaskTemplate | ClusterTemplate, Field(discriminator="kind")]
"""A task or a cluster template, told apart by `kind`."""

TemplateSource = Literal["user", "facility"]


class StoredTemplate(BaseModel):
    """A template as the gateway lists it: its name, whose it is and its body."""

    name: str = Field(description="The template's name")
    source: TemplateSource = Field(
        description="'user': the caller's own; 'facility': shipped in a profile (read-only)"
    )
    facility: str | None = Field(
        default=None, description="The facility whose profile ships it (source 'facility')"
    )
    updated_at: float | None = Field(
        default=None, description="When the user last wrote it (Unix time; user templates)"
    )
    shadowed: bool = Field(
        default=False,
        description="A user template that a facility template of the same name "
        "hides: jobs naming it get the facility's (rename it to use it)",
    )
    template: Template = Field(description="The template")
