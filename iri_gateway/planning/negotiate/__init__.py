"""JobSpec x resource -> Decision, or every reason it cannot run there. Pure: no I/O.

Each check appends to one list of problems, so a user sees all that is wrong at once, each
with the JSON path of the field, the reason, and what the resource offers instead.
"""

from __future__ import annotations

from collections.abc import Collection
from functools import partial

from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.models import cluster_ports
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import Decision
from iri_gateway.planning.negotiate import container as ctr
from iri_gateway.planning.negotiate.arrays import check_array
from iri_gateway.planning.negotiate.fields import (
    check_custom_attributes,
    check_directive_values,
    check_environment,
    check_nul,
    launch_mode,
)
from iri_gateway.planning.negotiate.flavours import FlavourChoice, unknown_facts
from iri_gateway.planning.negotiate.roles import negotiate_roles
from iri_gateway.planning.negotiate.shape import (
    check_hardware,
    check_queue_limits,
    choose_queue,
    derive_shape,
    reserve_default_gpus,
)
from iri_gateway.shell import SiteWord

__all__ = ["JOB_DIRECTORY", "FlavourChoice", "negotiate", "prepare_flavours", "unknown_facts"]

JOB_DIRECTORY = SiteWord("$PWD")


def negotiate(
    spec: JobSpec,
    loaded: LoadedResource,
    flavours: FlavourChoice | None = None,
    known_facts: Collection[str] | None = None,
) -> Decision:
    """Decide how `spec` runs on `loaded`; raise JobRejectedError listing every problem.

    A job with roles runs as one cluster job (see `negotiate.roles`); a job with image
    flavours runs as its best flavour there (see `negotiate.flavours`);
    `flavours`, from `prepare_flavours(spec)`, saves that work when one job meets many
    resources. `known_facts`: every fact the gateway's loaded resources define; a flavour
    requirement naming another one is refused (None: not checked, as for a job accepted
    before, whose update is checked).
    """
    if known_facts is not None and (unknown := unknown_facts(spec, known_facts)):
        raise JobRejectedError(loaded.id, unknown)
    if spec.roles:
        return negotiate_roles(spec, loaded, _negotiate_one)
    if spec.container is not None and spec.container.flavours:
        # An unknown field is the job's, whichever flavour runs: said once, not per flavour.
        unknown_fields: list[Problem] = []
        ctr.check_unknown_fields(spec.container, unknown_fields)
        if unknown_fields:
            raise JobRejectedError(loaded.id, unknown_fields)
        choice = flavours or FlavourChoice(spec, spec.container)
        return choice.decide(loaded, _negotiate_flavour)
    return _negotiate_one(spec, loaded)


def prepare_flavours(spec: JobSpec) -> FlavourChoice | None:
    """The resource-independent part of choosing `spec`'s flavour, or None without flavours."""
    if spec.container is not None and spec.container.flavours:
        return FlavourChoice(spec, spec.container)
    return None


def _negotiate_one(spec: JobSpec, loaded: LoadedResource, *, nul_checked: bool = False) -> Decision:
    """Negotiation of a job with (at most) one image.

    `nul_checked`: the job's text was already searched for NUL (a flavour's job: its whole
    text is in the job that `FlavourChoice` checked once).
    """
    resource = loaded.resource
    problems: list[Problem] = []
    warnings: list[str] = []

    if spec.executable is None and spec.container is None:
        problems.append(Problem("executable", "required when no container image is given"))
    if not nul_checked:
        check_nul(spec, problems)
    check_environment(spec, problems)
    check_directive_values(spec, resource, problems)
    check_custom_attributes(spec, resource, problems)
    array_environment = check_array(spec, resource, problems, warnings)

    queue = choose_queue(spec, resource, problems)
    shape = derive_shape(spec, queue, problems)
    check_hardware(shape, resource, problems)
    if queue is not None:
        check_queue_limits(shape, queue, problems)
    mode = launch_mode(spec, resource, shape.process_count, problems, warnings)
    scheduler = resource.scheduler.facts
    if scheduler.one_process and (mode != "none" or shape.process_count > 1):
        problems.append(
            Problem("resources.process_count", f"{resource.id} runs one process per job", "1")
        )
    if scheduler.parallel_needs_site_launcher and mode == "parallel" and resource.mpi is None:
        problems.append(
            Problem(
                "resources.process_count",
                f"{resource.id} has no launcher for several processes",
                "1",
            )
        )

    container = spec.container
    choice = ctr.choose_runtime(container, resource, problems)
    use_gpu = shape.gpus_per_process > 0
    use_mpi = mode == "mpi" and shape.process_count > 1
    # Without an explicit container workdir, the container starts where the job runs: the
    # script has already entered `directory`, so the runtime is pointed at "$PWD" (which also
    # works for a directory relative to the login account's home).
    workdir: str | None = JOB_DIRECTORY if spec.directory else None
    network = "host"
    if container is not None:
        ctr.check_unknown_fields(container, problems)
        use_gpu = container.gpu if container.gpu is not None else use_gpu
        use_mpi = container.mpi if container.mpi is not None else use_mpi
        workdir = container.workdir or workdir
        network = container.network
        if container.workdir is not None and not container.workdir.startswith("/"):
            problems.append(Problem("container.workdir", "must be an absolute path"))
        if choice is not None:
            if choice.config is None and container.runtime == "none":
                warnings.append(f"runtime 'none': image {container.image!r} is not used")
            elif choice.config is None:
                warnings.append(
                    f"{resource.id} runs jobs without containers (its default "
                    f"runtime is 'none'): image {container.image!r} is not used"
                )
            ctr.check_image(container, choice, resource.id, problems)
            ctr.check_gpu(container, choice, use_gpu, resource, problems)
            ctr.check_mounts(container, choice, problems)
            ctr.check_entrypoint(choice, bool(spec.executable or spec.arguments), problems)
            ctr.check_network(container, choice, problems)
            ctr.check_extra_options(container, choice, problems)
            if choice.config is not None and (use_gpu or container.devices):
                field = "container.gpu" if use_gpu else "container.devices"
                shape = reserve_default_gpus(shape, field, resource, problems, warnings)
    if choice is not None and choice.runtime.slurm_spank_options and scheduler.container_directives:
        # The runtime's image and volumes travel as directive lines (Shifter under Slurm).
        spank = [("container.image", choice.image or "")] + [
            (f"container.volume_mounts[{i}]", f"{m.source}:{m.target}")
            for i, m in enumerate(choice.mounts)
        ]
        for path, value in spank:
            reason = scheduler.container_directive_refusal(value)
            if reason is not None:
                problems.append(Problem(path, reason))
    if (
        choice is not None
        and workdir is JOB_DIRECTORY
        and choice.runtime.binds_job_directory
        and spec.directory is not None
        and any(c in spec.directory for c in ":,")
    ):
        problems.append(
            Problem(
                "directory",
                f"{choice.runtime.name} mounts the job directory into the container "
                "and cannot express ':' or ',' in its path",
                "container.workdir",
            )
        )
    if use_mpi and choice is not None:
        ctr.check_mpi(choice, resource, problems)
    if use_gpu and shape.gpus_per_process == 0 and resource.nodes.gpus is None:
        problems.append(
            Problem("container.gpu", f"the nodes of {resource.id} have no GPUs", "gpu: false")
        )

    if problems or choice is None:
        raise JobRejectedError(resource.id, problems)
    decision = Decision(
        spec=spec,
        resource=loaded,
        queue=queue,
        shape=shape,
        launcher=mode,
        runtime=choice.runtime.name,
        runtime_config=choice.config,
        image=choice.image,
        image_form=choice.image_form,
        use_gpu=use_gpu,
        gpu_flags=choice.gpu_flags,
        devices=choice.devices,
        use_mpi=use_mpi,
        mounts=choice.mounts,
        environment={
            **spec.environment,
            **cluster_ports.job_port_variables(spec.ports or {}),
            **array_environment,
        },
        workdir=workdir if choice.config is not None else None,
        network=network,
        extra_options=choice.extra_options,
        warnings=warnings,
    )
    # What only this runtime cannot do is known once the rest is settled (shape, launcher).
    refusals = choice.runtime.refusals(decision)
    if refusals:
        raise JobRejectedError(resource.id, refusals)
    return decision


_negotiate_flavour = partial(_negotiate_one, nul_checked=True)
