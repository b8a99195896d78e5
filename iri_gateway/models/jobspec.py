"""The IRI Facility API v2 JobSpec, exactly as the official spec defines it, plus our extensions.

Any JobSpec that validates against the official schema validates here unchanged: the official
objects that allow extra properties (`Container`, `ResourceSpec`, `JobAttributes`,
`VolumeMount`) allow them here too, and `JobSpec` itself forbids them, as the spec does.
Validation is strict, like the JSON Schema: "2" is not a node count.
Our extensions live inside `container` (where the official schema allows extra fields), plus
the top-level `roles`; all are optional; see DESIGN.md, Contract 1.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from iri_gateway.constraints import (
    ConstraintError,
    RequirementValue,
    parse_requirements,
    requirements_mapping,
)

NonEmptyStr = Annotated[str, Field(min_length=1)]
def whole_number(value: Any) -> Any:
    """JSON Schema counts 2.0 and 1.6e10 as integers; so do we (strings and bools stay errors)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


JsonInt = Annotated[int, BeforeValidator(whole_number)]
"""An integer as JSON Schema defines it: 2 and 2.0 both are; "2" and true are not."""
PositiveInt = Annotated[JsonInt, Field(ge=1)]

RUNTIME_NAMES = ("apptainer", "podman-hpc", "shifter", "podman", "none")
RuntimeName = Literal["apptainer", "podman-hpc", "shifter", "podman", "none"]
MPI_LAUNCHERS = frozenset({"srun", "mpirun", "mpiexec"})

_ATTRIBUTES_DESCRIPTION = (
    "Optional, type-specific metadata for this object (official IRI `attributes` field)."
)


class _Open(BaseModel):
    """Official objects that allow additional properties."""

    model_config = ConfigDict(extra="allow", strict=True)

    attributes: dict[str, Any] | None = Field(default=None, description=_ATTRIBUTES_DESCRIPTION)


class VolumeMount(_Open):
    """A host path made visible inside the container (official `VolumeMount`)."""

    source: NonEmptyStr = Field(description="The source path on the host system to mount")
    target: NonEmptyStr = Field(
        description="The target path inside the container where the volume will be mounted"
    )
    read_only: bool = Field(default=True, description="Whether the mount should be read-only")


def _valid_requirements(
    requirements: dict[str, RequirementValue],
) -> dict[str, RequirementValue]:
    try:
        parse_requirements(requirements)
    except ConstraintError as error:
        raise ValueError(str(error)) from None
    return requirements


Requirements = Annotated[
    dict[str, RequirementValue],
    BeforeValidator(requirements_mapping),
    AfterValidator(_valid_requirements),
]
"""Fact -> constraint; a list of one-key mappings is accepted too and stored as a mapping."""

FLAVOUR_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*$"


class Flavour(BaseModel):
    """Extension: one hardware-specific image of the job; the best one the resource runs wins."""

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, Field(pattern=FLAVOUR_NAME, max_length=64)] = Field(
        description="Flavour name, unique in the job (letters, digits, '.', '_', '-')"
    )
    image: NonEmptyStr = Field(description="The image of this flavour")
    priority: JsonInt = Field(
        default=0, description="Higher wins among the flavours a resource can run"
    )
    requirements: Requirements = Field(
        default_factory=dict,
        description="Hardware fact -> constraint, e.g. {gpu_count: '>= 2', nvidia_cuda: '> 11'} "
        "(or a list of one-key mappings); every one must hold on the resource.",
    )
    runtime: RuntimeName | None = Field(
        default=None, description="Runtime for this flavour; default: container.runtime"
    )
    extra_options: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Options added to container.extra_options when this flavour is chosen",
    )


class Container(_Open):
    """Official `Container` plus the gateway's optional extensions (DESIGN.md Contract 1)."""

    image: NonEmptyStr | None = Field(
        default=None,
        description="The container image to use (e.g., 'docker.io/library/ubuntu:latest'); "
        "required unless `flavours` are given, and then the image used when no flavour fits.",
    )
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, description="List of volume mounts for the container"
    )
    runtime: RuntimeName | None = Field(
        default=None,
        description="Extension: preferred container runtime; default: the resource's default.",
    )
    gpu: bool | None = Field(
        default=None,
        description="Extension: give the container the node's GPUs; default: true when "
        "resources.gpu_cores_per_process > 0.",
    )
    mpi: bool | None = Field(
        default=None,
        description="Extension: bind the site's MPI into the container; default: true when the "
        "launcher is an MPI launcher (srun, mpirun, mpiexec) with more than one process.",
    )
    devices: list[NonEmptyStr] = Field(
        default_factory=list,
        description="Extension: CDI device names, e.g. 'nvidia.com/gpu=all'.",
    )
    network: Literal["host", "none"] = Field(
        default="host", description="Extension: container network; 'host' (default) or 'none'."
    )
    workdir: NonEmptyStr | None = Field(
        default=None,
        description="Extension: working directory inside the container; default: `directory`.",
    )
    extra_options: dict[str, list[str]] = Field(
        default_factory=dict,
        description="Extension: site-specific escape hatch, {runtime name: [option, ...]}; "
        "each option must match the resource's allow-list for that runtime.",
    )
    flavours: list[Flavour] = Field(
        default_factory=list,
        description="Extension: alternative hardware-specific images; the gateway picks the "
        "highest-priority flavour whose requirements hold and whose job negotiates there.",
    )

    @model_validator(mode="after")
    def _image_or_flavours(self) -> Container:
        if self.image is None and not self.flavours:
            raise ValueError("image is required unless flavours are given")
        names = [flavour.name for flavour in self.flavours]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"flavour names must be unique; given twice: {', '.join(twice)}")
        return self


class ResourceSpec(_Open):
    """Official `ResourceSpec`: what the job asks of the machine."""

    node_count: PositiveInt | None = Field(default=None, description="Number of compute nodes")
    process_count: PositiveInt | None = Field(
        default=None, description="Total number of processes to launch"
    )
    processes_per_node: PositiveInt | None = Field(
        default=None, description="Number of processes to launch per node"
    )
    cpu_cores_per_process: PositiveInt | None = Field(
        default=None, description="Number of CPU cores to allocate per process"
    )
    gpu_cores_per_process: PositiveInt | None = Field(
        default=None, description="Number of GPU cores to allocate per process"
    )
    exclusive_node_use: bool = Field(
        default=True, description="Whether to request exclusive use of allocated nodes"
    )
    memory: PositiveInt | None = Field(
        default=None, description="Amount of memory to allocate per node, in bytes"
    )


class JobAttributes(_Open):
    """Official `JobAttributes`: scheduling parameters."""

    duration: PositiveInt | None = Field(default=None, description="Duration in seconds")
    queue_name: NonEmptyStr | None = Field(
        default=None, description="Name of the queue or partition to submit the job to"
    )
    account: NonEmptyStr | None = Field(
        default=None, description="Account or project to charge for resource usage"
    )
    reservation_id: NonEmptyStr | None = Field(
        default=None, description="ID of a reservation to use for the job"
    )
    custom_attributes: dict[str, str] = Field(
        default_factory=dict,
        description="Custom scheduler-specific attributes as key-value pairs; each key must be "
        "on the resource's allow-list.",
    )


ROLE_NAME = r"^[a-z](?:[a-z0-9-]*[a-z-])?$"
"""Role names become host names (`worker` + index: `worker3`), so: lower case, not ending in
a digit (`w1` + `1` would read like `w` + `11`)."""
MAX_ROLE_MEMBERS = 100_000


def _role_name(name: str) -> str:
    if not re.fullmatch(ROLE_NAME, name):
        raise ValueError(
            f"{name!r}: role names are lower case letters, digits and '-', start with a letter "
            "and do not end in a digit (members are named worker1, worker2, ...)"
        )
    return name


class RoleContainer(_Open):
    """A role's own container settings; every field left out is the job's `container`'s."""

    image: NonEmptyStr | None = Field(default=None, description="The role's image")
    volume_mounts: list[VolumeMount] = Field(
        default_factory=list, description="Mounts added to the job's (same target: the role's)"
    )
    runtime: RuntimeName | None = Field(default=None, description="The role's runtime")
    gpu: bool | None = Field(default=None, description="Give the members the node's GPUs")
    devices: list[NonEmptyStr] | None = Field(default=None, description="CDI device names")
    network: Literal["host", "none"] | None = Field(
        default=None, description="'host' or 'none'; members reach each other only with 'host'"
    )
    workdir: NonEmptyStr | None = Field(default=None, description="Working directory inside")
    extra_options: dict[str, list[str]] = Field(
        default_factory=dict, description="Options added after the job's, per runtime"
    )


class Role(BaseModel):
    """Extension: one kind of member of a cluster job, e.g. 1 `master` and 12 `worker`.

    Top-level JobSpec fields are the defaults of every role; a role's own fields win
    (environment, mounts and extra options are merged, the role's entries last).
    """

    model_config = ConfigDict(extra="forbid", strict=True)

    name: Annotated[str, Field(max_length=40), AfterValidator(_role_name)] = Field(
        description="Role name (lower case letters, digits, '-'; starts with a letter, does not "
        "end in a digit); members are named name1, name2, ... (no zero padding)",
        json_schema_extra={"pattern": ROLE_NAME},
    )
    count: Annotated[JsonInt, Field(ge=1, le=MAX_ROLE_MEMBERS)] = Field(
        description="How many members this role has"
    )
    executable: NonEmptyStr | None = Field(default=None, description="The members' program")
    arguments: list[str] | None = Field(
        default=None, description="Arguments; default: the job's when the executable is too"
    )
    container: RoleContainer | None = Field(default=None, description="Container overrides")
    environment: dict[str, str] = Field(
        default_factory=dict, description="Variables added to (and overriding) the job's"
    )
    resources: ResourceSpec | None = Field(
        default=None,
        description="Per member: cpu_cores_per_process, gpu_cores_per_process; "
        "processes_per_node = members per node (default 1); memory per node. Fields left out "
        "are the job's.",
    )


class JobSpec(BaseModel):
    """Official IRI v2 `JobSpec` (PSI/J field names) plus `roles`; other extra fields are
    refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    attributes: JobAttributes | None = Field(
        default=None, description="Additional job attributes such as duration, queue, account"
    )
    executable: NonEmptyStr | None = Field(
        default=None,
        description="Path to the executable to run; with a container, the container's "
        "entrypoint is replaced by it.",
    )
    container: Container | None = Field(
        default=None, description="Container specification for containerized execution"
    )
    arguments: list[str] = Field(
        default_factory=list, description="Command-line arguments to pass to the executable"
    )
    directory: NonEmptyStr | None = Field(default=None, description="Working directory")
    name: NonEmptyStr | None = Field(default=None, description="Name of the job")
    inherit_environment: bool = Field(
        default=True,
        description="Whether to inherit the environment variables of the submission environment",
    )
    environment: dict[str, str] = Field(
        default_factory=dict,
        description="Environment variables for the job; set inside the container if any",
    )
    stdin_path: NonEmptyStr | None = Field(default=None, description="Standard input file")
    stdout_path: NonEmptyStr | None = Field(default=None, description="Standard output file")
    stderr_path: NonEmptyStr | None = Field(default=None, description="Standard error file")
    resources: ResourceSpec | None = Field(default=None, description="Resource requirements")
    pre_launch: NonEmptyStr | None = Field(
        default=None,
        description="Shell commands run (evaluated as written) before the job is launched",
    )
    post_launch: NonEmptyStr | None = Field(
        default=None,
        description="Shell commands run (evaluated as written) after the job completes",
    )
    launcher: NonEmptyStr | None = Field(
        default=None, description="Job launcher to use (e.g., 'mpirun', 'srun')"
    )
    roles: list[Role] | None = Field(
        default=None,
        min_length=1,
        description="Extension: a cluster job of several roles run as one scheduler job; "
        "members find each other by name (master1, worker1, ...). Top-level fields are the "
        "defaults of every role.",
    )

    @model_validator(mode="after")
    def _role_names_unique(self) -> JobSpec:
        names = [role.name for role in self.roles or []]
        twice = sorted({name for name in names if names.count(name) > 1})
        if twice:
            raise ValueError(f"role names must be unique; given twice: {', '.join(twice)}")
        return self
