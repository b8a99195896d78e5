"""The IRI Facility API v2 JobSpec, exactly as the official spec defines it, plus our extensions.

Any JobSpec that validates against the official schema validates here unchanged: the official
objects that allow extra properties (`Container`, `ResourceSpec`, `JobAttributes`,
`VolumeMount`) allow them here too, and `JobSpec` itself forbids them, as the spec does.
Validation is strict, like the JSON Schema: "2" is not a node count.
Our extensions live inside `container` (where the official schema allows extra fields) and are
all optional; see DESIGN.md, Contract 1.
"""

from __future__ import annotations

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


class JobSpec(BaseModel):
    """Official IRI v2 `JobSpec` (PSI/J field names). Extra top-level fields are refused."""

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
