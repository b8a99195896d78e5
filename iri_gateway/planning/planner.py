"""The one path from JobSpec to Plan, shared by dry runs and submission.

`make_plan` negotiates and renders; what it returns as `script` is byte for byte what
submission sends to the scheduler, because submission calls this same function.
"""

from __future__ import annotations

from collections.abc import Collection

from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.models.jobspec import JobSpec
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import (
    ArrayView,
    ClusterView,
    Decision,
    GpuView,
    MountView,
    MpiView,
    Plan,
    RoleView,
    ShapeView,
)
from iri_gateway.planning.negotiate import negotiate
from iri_gateway.planning.render import pre_submit_commands, render_script
from iri_gateway.schedulers import SCHEDULERS


def make_plan(
    spec: JobSpec, loaded: LoadedResource, known_facts: Collection[str] | None = None
) -> Plan:
    """Negotiate `spec` on `loaded` and render its script; JobRejectedError if it cannot run.

    `known_facts`: the facts of every loaded resource (see `negotiate`). A job naming a
    template must be expanded first (`planning/job_templates.py`): planning it as it is would
    silently leave the template out."""
    if spec.template is not None:
        raise JobRejectedError(
            loaded.id,
            [
                Problem(
                    "template",
                    f"template {spec.template!r} was not expanded before planning; "
                    "templates are applied by the gateway (or the CLI) that knows them",
                )
            ],
        )
    decision = negotiate(spec, loaded, known_facts=known_facts)
    return describe(decision, render_script(decision))


def describe(decision: Decision, script: str) -> Plan:
    """The public summary of a decision and its rendered script."""
    resource = decision.resource.resource
    shape = decision.shape
    gpu = None
    if decision.use_gpu or decision.devices:
        gpu = GpuView(
            flags=list(decision.gpu_flags),
            devices=list(decision.devices),
            gpus_per_node=shape.gpus_per_node,
            request="whole-node"
            if shape.whole_node_gpus
            else "per-process"
            if shape.gpus_per_process
            else "none",
        )
    mpi = None
    if decision.use_mpi and resource.mpi is not None:
        config = decision.runtime_config
        binding = config.mpi if config is not None else None
        flags: list[str] = []
        if binding is not None:
            chosen = binding.gpu_flags if decision.use_gpu and binding.gpu_flags else None
            flags = list(chosen if chosen is not None else binding.flags)
        launcher = SCHEDULERS[resource.scheduler.kind].launcher(decision)
        mpi = MpiView(
            flavour=resource.mpi.flavour,
            launcher=" ".join(launcher),
            container_flags=flags,
            modules=list(resource.mpi.modules) + (list(binding.modules) if binding else []),
        )
    cluster = None
    if decision.cluster is not None:
        cluster = ClusterView(
            size=decision.cluster.size,
            hosts=decision.cluster.hosts,
            primary=decision.cluster.members[0].name,
            roles=[
                RoleView(
                    name=role.name,
                    count=role.count,
                    members_per_node=role.per_node,
                    node_count=role.node_count,
                    runtime=role.decision.runtime,
                    image=role.decision.image,
                    gpus_per_member=role.decision.shape.gpus_per_process
                    or role.decision.shape.whole_node_gpus,
                    flavour=role.decision.flavour,
                )
                for role in decision.cluster.roles
            ],
            lifecycle=decision.cluster.lifecycle,
            ports=decision.cluster.ports,
        )
    return Plan(
        facility=decision.resource.profile.facility.id,
        resource=decision.resource.id,
        scheduler=resource.scheduler.kind,
        queue=decision.queue.name if decision.queue else None,
        runtime=decision.runtime,
        image=decision.image,
        image_form=decision.image_form,
        app=decision.spec.container.app if decision.spec.container else None,
        flavour=decision.flavour,
        flavours=list(decision.flavours),
        launcher=decision.launcher,
        cluster=cluster,
        array=_array_view(decision),
        gpu=gpu,
        mpi=mpi,
        mounts=[
            MountView(source=m.source, target=m.target, read_only=m.read_only)
            for m in decision.mounts
        ],
        shape=ShapeView(
            node_count=shape.node_count,
            process_count=shape.process_count,
            processes_per_node=shape.processes_per_node,
            cpus_per_process=shape.cpus_per_process,
            gpus_per_process=shape.gpus_per_process,
            gpus_per_node=shape.gpus_per_node,
            memory_mib=shape.memory_mib,
            walltime_seconds=shape.walltime_seconds,
            exclusive=shape.exclusive,
        ),
        pre_submit=[list(command) for command in pre_submit_commands(decision)],
        warnings=list(decision.warnings),
        script=script,
    )


def _array_view(decision: Decision) -> ArrayView | None:
    array = decision.spec.array
    rules = decision.resource.resource.scheduler.facts.arrays
    if array is None or rules is None:
        return None
    indices = array.elements()
    return ArrayView(
        indices=indices.text(),
        count=len(indices),
        max_concurrent=array.max_concurrent,
        index_variable=rules.index_variable,
    )
