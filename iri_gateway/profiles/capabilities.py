"""What a resource offers, in one queryable document: hardware facts, queues, runtimes, MPI.

The same document backs `iri-gateway capabilities` and (in the API) the capabilities
endpoint. Hardware facts are derived from the structured profile (`iri_gateway.models.facts`), never
hand-written, so flavour requirements can be checked against them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from iri_gateway.models.limits import JobSpecLimits
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.profile import ClusterJobs, RuntimeConfig
from iri_gateway.runtimes import RUNTIMES


class QueueCapability(BaseModel):
    """A queue and its limits."""

    name: str
    default: bool
    max_walltime: int | None = Field(description="Seconds")
    default_walltime: int | None = Field(description="Seconds")
    max_nodes: int | None


class RuntimeCapability(BaseModel):
    """One container runtime as this resource offers it."""

    name: str
    default: bool
    gpu: str | None = Field(description="How GPUs are bound (flags or CDI devices), or None")
    cdi_devices: list[str]
    mpi: str | None = Field(description="How MPI is bound, or None")
    mount_sources: list[str] = Field(description="Allowed mount source prefixes")
    read_write_mounts: bool
    read_only_mounts: bool = Field(
        default=True,
        description="The runtime can mount read-only; false: it cannot (Charliecloud's ch-run), "
        "so a read-only mount is refused and mounts must say read_only: false",
    )
    networks: list[str]
    image_forms: list[str]
    allowed_extra_options: list[str]
    image_staging: str
    oci_mode: bool = Field(
        default=False, description="Apptainer runs in OCI mode (`--oci`), taking CDI devices"
    )
    oci_conf: str | None = Field(
        default=None,
        description="slurm-oci: the runtime the site's Slurm oci.conf drives ('runc')",
    )
    rootfs_cache: str | None = Field(
        default=None,
        description="slurm-oci: where the job's user's staged root filesystems are kept",
    )
    max_processes_per_node: int | None = Field(
        default=None,
        description="Processes a node may run in this runtime (None: no limit of its own; "
        "slurm-oci: 1, Slurm 22.05 runs one container task per node)",
    )


class Capabilities(BaseModel):
    """Everything a user may ask of one resource."""

    facility: str
    resource: str
    name: str
    description: str
    scheduler: str
    connection: str
    hardware: dict[str, Any]
    detected: list[str] = Field(
        default_factory=list,
        description="The hardware facts measured on the gateway's machine at start "
        "(`nodes.detect` in the profile) rather than written in the profile",
    )
    queues: list[QueueCapability]
    mpi: dict[str, Any] | None
    runtimes: list[RuntimeCapability]
    allowed_custom_attributes: list[str]
    gpu_default_request: Literal["whole-node", "refuse"] = Field(
        default="whole-node",
        description="A job giving its container GPUs without gpu_cores_per_process: "
        "'whole-node' reserves every GPU of each node, 'refuse' rejects it",
    )
    cluster_jobs: ClusterJobs = Field(
        description="Cluster jobs (JobSpec roles): whether they run here, and the limits"
    )
    example_profile: bool
    file_roots: list[str] = Field(
        description="Folders a user may name as a job's `directory` and read, as the profile's "
        "templates (`{user}`, `{account}`, `{account_initial}`, `~`), besides the job folders "
        "the gateway makes; empty: only those"
    )
    jobspec_limits: JobSpecLimits = Field(
        description="Size limits every JobSpec must respect (a larger one is refused, 422)"
    )
    max_request_bytes: int | None = Field(
        default=None,
        description="Largest request body the server accepts, in bytes (413 beyond it); "
        "None when no server is asked (the offline CLI)",
    )


def _runtime(name: str, config: RuntimeConfig, default: bool) -> RuntimeCapability:
    gpu = config.gpu
    mpi = config.mpi
    gpu_text = None
    if gpu is not None:
        parts = []
        if gpu.flags:
            parts.append("flags " + " ".join(gpu.flags))
        if gpu.cdi_devices:
            parts.append("CDI")
        if gpu.env and not parts:
            parts.append("environment")
        gpu_text = ", ".join(parts)
    mpi_text = None
    if mpi is not None:
        mpi_text = " ".join(mpi.flags) or "environment and binds"
        if mpi.gpu_flags:
            mpi_text += f" (with GPUs: {' '.join(mpi.gpu_flags)})"
    staging = config.staging
    runtime = RUNTIMES[name]
    staged_into = " FOLDER" if runtime.stages_in_launch else ""
    return RuntimeCapability(
        name=name,
        default=default,
        gpu=gpu_text,
        cdi_devices=list(gpu.cdi_devices) if gpu else [],
        mpi=mpi_text,
        mount_sources=list(config.mounts.allowed_sources),
        read_write_mounts=config.mounts.read_write,
        read_only_mounts=RUNTIMES[name].read_only_refusal is None,
        networks=list(config.networks),
        image_forms=list(config.image_forms),
        allowed_extra_options=list(config.allowed_extra_options),
        image_staging=staging.when
        if staging.when == "never"
        else f"{staging.when}: {' '.join(staging.command)} IMAGE{staged_into}",
        oci_mode=config.oci_mode,
        oci_conf=config.oci_conf,
        rootfs_cache=config.rootfs_cache,
        max_processes_per_node=runtime.max_processes_per_node,
    )


def capabilities(loaded: LoadedResource, *, max_request_bytes: int | None = None) -> Capabilities:
    """The capability document of one loaded resource (and the server's body limit)."""
    resource = loaded.resource
    runtimes = [
        _runtime(name, config, name == resource.runtimes.default)
        for name in resource.runtimes.available()
        if (config := resource.runtimes.get(name)) is not None
    ]
    mpi = None
    if resource.mpi is not None:
        mpi = {
            "flavour": resource.mpi.flavour,
            "launcher": resource.mpi.launcher,
            "accepts": list(resource.mpi.accepts),
        }
    return Capabilities(
        facility=loaded.profile.facility.id,
        resource=resource.id,
        name=resource.name,
        description=resource.description,
        scheduler=resource.scheduler.kind,
        connection=resource.connection.mode,
        hardware=dict(loaded.facts),
        detected=list(loaded.detected),
        queues=[
            QueueCapability(
                name=q.name,
                default=q is resource.default_queue,
                max_walltime=q.max_walltime,
                default_walltime=q.default_walltime,
                max_nodes=q.max_nodes,
            )
            for q in resource.queues
        ],
        mpi=mpi,
        runtimes=runtimes,
        allowed_custom_attributes=list(resource.scheduler.allowed_custom_attributes),
        gpu_default_request=resource.scheduler.gpu_default_request,
        cluster_jobs=resource.scheduler.cluster_jobs,
        example_profile=loaded.profile.facility.example,
        file_roots=list(resource.files.roots),
        jobspec_limits=JobSpecLimits(),
        max_request_bytes=max_request_bytes,
    )
