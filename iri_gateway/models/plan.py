"""What negotiation decided for one JobSpec on one resource.

`Decision` is the internal result handed to the scheduler, runtime and template code: it still
knows which words came from the site (`SiteWord`) and which from the user. `Plan` is its
public, JSON-serialisable summary, with the exact batch script, as the `plan` command and the
API show it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from iri_gateway.models.jobspec import AppRef, JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import Queue, RuntimeConfig
from iri_gateway.shell import SiteWord


@dataclass(frozen=True)
class JobShape:
    """The job's size, with defaults filled in and per-node figures derived."""

    node_count: int
    process_count: int
    processes_per_node: int | None
    cpus_per_process: int | None
    gpus_per_process: int
    memory_mib: int | None
    walltime_seconds: int | None
    exclusive: bool
    # GPUs reserved per node for a job that gives its container GPUs without a per-process
    # count, under the site's `gpu_default_request: whole-node`: all of a node's.
    whole_node_gpus: int = 0

    @property
    def processes_on_busiest_node(self) -> int:
        """Processes on the fullest node: the explicit figure or an even spread rounded up."""
        if self.processes_per_node is not None:
            return self.processes_per_node
        return -(-self.process_count // self.node_count)

    @property
    def gpus_per_node(self) -> int:
        """GPUs the scheduler is asked for on each node."""
        if self.whole_node_gpus:
            return self.whole_node_gpus
        return self.gpus_per_process * self.processes_on_busiest_node


@dataclass(frozen=True)
class Mount:
    """A checked bind mount."""

    source: str
    target: str
    read_only: bool

    def bind_spec(self, rw_suffix: bool = True) -> str:
        """`source:target:ro|rw` (or without `:rw` when the runtime defaults to it)."""
        if self.read_only:
            return f"{self.source}:{self.target}:ro"
        return f"{self.source}:{self.target}:rw" if rw_suffix else f"{self.source}:{self.target}"


FlavourStatus = Literal["chosen", "rejected", "outranked"]


@dataclass(frozen=True)
class FlavourOutcome:
    """What became of one image flavour on a resource, and why.

    A plain dataclass rather than a model: placement makes one per flavour and resource, and
    pydantic still validates, serialises and documents it inside `Plan` and `Placement`.
    """

    name: Annotated[str, Field(description="Flavour name")]
    priority: Annotated[int, Field(description="Its priority")]
    status: Annotated[
        FlavourStatus,
        Field(
            description="'chosen'; 'rejected' (a requirement failed, or its job cannot run "
            "here); 'outranked' (it fits, but a higher-priority flavour was chosen)"
        ),
    ]
    reason: Annotated[
        str | None,
        Field(
            description="For a rejected flavour, the first requirement or problem that failed; "
            "for an outranked one, the flavour chosen"
        ),
    ]


@dataclass(frozen=True)
class Member:
    """One member of a cluster job: `worker3` is member 3 of role `worker`."""

    name: str
    role: str
    index: int  # 1-based within its role
    role_number: int  # 0-based position of its role (the Slurm het group, the PBS chunk)
    slot: int  # 0-based position among its role's members


@dataclass
class RoleDecision:
    """How one role's members run: the decision for one member, and how many share a node."""

    name: str
    count: int
    per_node: int
    node_count: int
    decision: Decision


def role_shape(role: RoleDecision) -> JobShape:
    """The scheduler request of a whole role: its members as processes, `per_node` a node."""
    member = role.decision.shape
    return JobShape(
        node_count=role.node_count,
        process_count=role.count,
        processes_per_node=role.per_node,
        cpus_per_process=member.cpus_per_process,
        gpus_per_process=member.gpus_per_process,
        memory_mib=member.memory_mib,
        walltime_seconds=member.walltime_seconds,
        exclusive=member.exclusive,
        whole_node_gpus=member.whole_node_gpus,
    )


@dataclass
class ClusterDecision:
    """The roles and members of a cluster job; the first member of the first role is primary."""

    roles: list[RoleDecision]
    members: list[Member]
    ports: dict[str, dict[str, int]] = field(default_factory=dict)  # member -> name -> port
    lifecycle: str = "primary_ends_all"

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def hosts(self) -> str:
        """`IRI_CLUSTER_HOSTS`: every member's name, in order."""
        return ",".join(member.name for member in self.members)


@dataclass
class Decision:
    """Everything negotiation settled; renderers only lay it out."""

    spec: JobSpec
    resource: LoadedResource
    queue: Queue | None
    shape: JobShape
    launcher: Literal["none", "parallel", "mpi"]
    runtime: str
    runtime_config: RuntimeConfig | None
    image: str | None
    image_form: str | None
    use_gpu: bool
    gpu_flags: list[SiteWord]
    devices: list[str]
    use_mpi: bool
    mounts: list[Mount]
    environment: dict[str, str]
    workdir: str | None
    network: str
    extra_options: list[str]
    warnings: list[str] = field(default_factory=list)
    flavour: str | None = None
    flavours: list[FlavourOutcome] = field(default_factory=list)
    cluster: ClusterDecision | None = None
    binds: list[SiteWord] = field(default_factory=list)  # gateway-made binds (hosts file)


class ArrayView(BaseModel):
    """An array job's elements as the scheduler is asked for them."""

    indices: str = Field(description="The indices, in the scheduler's --array grammar")
    count: int = Field(description="How many elements")
    max_concurrent: int | None = Field(description="At most this many run at once (none: no cap)")
    index_variable: str = Field(
        description="The scheduler's variable holding an element's index (the job also "
        "gets it as IRI_ARRAY_INDEX)"
    )


class GpuView(BaseModel):
    """How GPUs reach the container."""

    flags: list[str] = Field(description="Vendor flags passed to the runtime")
    devices: list[str] = Field(description="CDI devices passed to the runtime")
    gpus_per_node: int = Field(description="GPUs reserved from the scheduler per node")
    request: Literal["per-process", "whole-node", "none"] = Field(
        default="per-process",
        description="How they were reserved: 'per-process' (resources.gpu_cores_per_process), "
        "'whole-node' (none named; the site's gpu_default_request reserved every GPU of each "
        "node) or 'none' (nothing reserved: the resource's scheduler reserves no GPUs)",
    )


class MpiView(BaseModel):
    """How MPI is launched and bound."""

    flavour: str = Field(description="The site's MPI implementation")
    launcher: str = Field(description="The launcher command")
    container_flags: list[str] = Field(description="Runtime flags binding MPI into the image")
    modules: list[str] = Field(description="Modules loaded for MPI")


class MountView(BaseModel):
    """A bind mount as it will be made."""

    source: str
    target: str
    read_only: bool


class ShapeView(BaseModel):
    """The job's size as the scheduler will be asked for it."""

    node_count: int
    process_count: int
    processes_per_node: int | None
    cpus_per_process: int | None
    gpus_per_process: int
    gpus_per_node: int
    memory_mib: int | None
    walltime_seconds: int | None
    exclusive: bool


class RoleView(BaseModel):
    """One role of a cluster job as it will run."""

    name: str = Field(description="Role name")
    count: int = Field(description="Members")
    members_per_node: int = Field(description="Members sharing one node")
    node_count: int = Field(description="Nodes of this role")
    runtime: str = Field(description="Container runtime of its members")
    image: str | None = Field(description="Image as the runtime receives it")
    gpus_per_member: int = Field(description="GPUs reserved per member")
    flavour: str | None = Field(
        default=None, description="The image flavour its members run, when it has flavours"
    )


class ClusterView(BaseModel):
    """The members of a cluster job and how they find each other."""

    size: int = Field(description="IRI_CLUSTER_SIZE: all members")
    hosts: str = Field(description="IRI_CLUSTER_HOSTS: the members' names, comma-separated")
    primary: str = Field(description="The member whose output is the job's output")
    roles: list[RoleView] = Field(description="Roles in order (Slurm het groups, PBS chunks)")
    lifecycle: str = Field(
        default="primary_ends_all",
        description="cluster_lifecycle: 'primary_ends_all', 'first_failure_ends_all' or "
        "'all_must_end'",
    )
    ports: dict[str, dict[str, int]] = Field(
        default_factory=dict,
        description="Each member's named service ports (member -> name -> port); "
        "IRI_CLUSTER_ENDPOINTS lists them as name:member:port",
    )


class Plan(BaseModel):
    """A dry run's answer: how the job would run, and the exact script submission would use."""

    facility: str = Field(description="Facility id")
    resource: str = Field(description="Resource id")
    scheduler: str = Field(description="'slurm', 'pbs' or 'local'")
    queue: str | None = Field(description="Queue or partition chosen")
    runtime: str = Field(description="Container runtime chosen ('none': no container)")
    image: str | None = Field(description="Image reference as the runtime receives it")
    image_form: str | None = Field(description="Form the image was given in")
    app: AppRef | None = Field(
        default=None, description="The app and version of the image (container.app), if named"
    )
    flavour: str | None = Field(
        default=None, description="The image flavour chosen, when the job lists flavours"
    )
    flavours: list[FlavourOutcome] = Field(
        default_factory=list,
        description="Every flavour of the job, in declaration order, with what became of it",
    )
    template: str | None = Field(
        default=None, description="The job template the job was built from, when it names one"
    )
    launcher: str = Field(description="'none', 'parallel' (N copies) or 'mpi'")
    cluster: ClusterView | None = Field(
        default=None, description="For a job with roles: its roles and members"
    )
    array: ArrayView | None = Field(default=None, description="For an array job: its elements")
    gpu: GpuView | None = Field(description="GPU binding, when GPUs are used")
    mpi: MpiView | None = Field(description="MPI binding, when MPI is used")
    mounts: list[MountView] = Field(description="Bind mounts")
    shape: ShapeView = Field(description="Job size")
    pre_submit: list[list[str]] = Field(
        description="Commands (argv) to run on the login node before submission"
    )
    warnings: list[str] = Field(description="Things the user should know; not errors")
    script: str = Field(description="The batch script, byte for byte as it would be submitted")
