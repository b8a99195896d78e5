"""Size and placement checks: node/process counts, GPUs, CPUs, memory, queue and walltime."""

from __future__ import annotations

from dataclasses import replace

from iri_gateway.errors import Problem
from iri_gateway.models.jobspec import JobSpec, ResourceSpec
from iri_gateway.models.plan import JobShape
from iri_gateway.models.profile import Queue, Resource

_MIB = 1024 * 1024


def derive_shape(spec: JobSpec, queue: Queue | None, problems: list[Problem]) -> JobShape:
    """Fill in the counts the JobSpec leaves out, and report counts that contradict each other.

    Defaults follow PSI/J: one node; one process per node unless a process count is given;
    with processes_per_node and process_count, just enough nodes to hold them.
    """
    res = spec.resources or ResourceSpec()
    ppn = res.processes_per_node
    if res.node_count is not None:
        nodes = res.node_count
    elif res.process_count is not None and ppn is not None:
        nodes = -(-res.process_count // ppn)
    else:
        nodes = 1
    processes = res.process_count if res.process_count is not None else nodes * (ppn or 1)
    if processes < nodes:
        problems.append(
            Problem(
                "resources.process_count",
                f"{processes} processes cannot occupy {nodes} nodes; every node needs one",
                f"at least {nodes} processes, or node_count <= {processes}",
            )
        )
    if ppn is not None and processes > nodes * ppn:
        problems.append(
            Problem(
                "resources.process_count",
                f"{processes} processes do not fit on {nodes} nodes x {ppn} per node",
                f"at most {nodes * ppn}",
            )
        )
    walltime = spec.attributes.duration if spec.attributes else None
    if walltime is None and queue is not None:
        walltime = queue.default_walltime
    memory_mib = -(-res.memory // _MIB) if res.memory is not None else None
    return JobShape(
        node_count=nodes,
        process_count=processes,
        processes_per_node=ppn,
        cpus_per_process=res.cpu_cores_per_process,
        gpus_per_process=res.gpu_cores_per_process or 0,
        memory_mib=memory_mib,
        walltime_seconds=walltime,
        exclusive=res.exclusive_node_use,
    )


def check_hardware(shape: JobShape, resource: Resource, problems: list[Problem]) -> None:
    """The shape must fit the resource's nodes: count, GPUs, cores and memory per node."""
    nodes = resource.nodes
    if shape.node_count > nodes.count:
        problems.append(
            Problem(
                "resources.node_count",
                f"{shape.node_count} nodes asked; {resource.id} has {nodes.count}",
                f"at most {nodes.count}",
            )
        )
    if shape.gpus_per_process:
        if nodes.gpus is None:
            problems.append(
                Problem(
                    "resources.gpu_cores_per_process",
                    f"GPUs asked, but the nodes of {resource.id} have none",
                    "0 (CPU only)",
                )
            )
        elif shape.gpus_per_node > nodes.gpus.count:
            problems.append(
                Problem(
                    "resources.gpu_cores_per_process",
                    f"{shape.gpus_per_process} GPUs per process x "
                    f"{shape.processes_on_busiest_node} processes per node = "
                    f"{shape.gpus_per_node} GPUs per node; the nodes have {nodes.gpus.count}",
                    f"at most {nodes.gpus.count} {nodes.gpus.vendor} {nodes.gpus.model} per node",
                )
            )
    check_cores(shape, resource, problems)
    if shape.memory_mib is not None:
        available = int(nodes.memory_gib * 1024)
        if shape.memory_mib > available:
            problems.append(
                Problem(
                    "resources.memory",
                    f"{shape.memory_mib} MiB per node asked; the nodes have {available} MiB",
                    f"at most {available * _MIB} bytes",
                )
            )


def check_cores(shape: JobShape, resource: Resource, problems: list[Problem]) -> None:
    """Every process needs a core of its node (`cpu_cores_per_process` of them when given).

    A count no node could hold (`process_count: 1e9` on one node, `processes_per_node:
    2**63`) is refused here, naming the count, instead of waiting in the queue forever or
    failing in the scheduler with no field named.
    """
    nodes = resource.nodes
    cores = nodes.cpu.cores
    busiest = shape.processes_on_busiest_node
    too_many = busiest > cores
    if too_many:
        fit = cores // (shape.cpus_per_process or 1)
        if shape.processes_per_node is not None:
            problems.append(
                Problem(
                    "resources.processes_per_node",
                    f"{busiest} processes per node; the nodes of {resource.id} have {cores} cores",
                    f"at most {fit} per node",
                )
            )
        else:
            problems.append(
                Problem(
                    "resources.process_count",
                    f"{shape.process_count} processes on {shape.node_count} node(s) put {busiest} "
                    f"on a node; the nodes of {resource.id} have {cores} cores",
                    f"at most {fit * shape.node_count} on {shape.node_count} node(s), "
                    f"{fit * nodes.count} on all {nodes.count} nodes (set node_count)",
                )
            )
    per_process = shape.cpus_per_process
    if per_process is not None and (
        per_process > cores or (not too_many and per_process * busiest > cores)
    ):
        problems.append(
            Problem(
                "resources.cpu_cores_per_process",
                f"{per_process} cores per process x {busiest} processes per node = "
                f"{per_process * busiest} cores per node; the nodes have {cores}",
                f"at most {cores} cores per node",
            )
        )


def choose_queue(spec: JobSpec, resource: Resource, problems: list[Problem]) -> Queue | None:
    """The queue the job names, else the resource's default; None with a problem otherwise."""
    wanted = spec.attributes.queue_name if spec.attributes else None
    offered = ", ".join(q.name for q in resource.queues)
    if wanted is None:
        queue = resource.default_queue
        if queue is None:
            problems.append(
                Problem(
                    "attributes.queue_name",
                    f"{resource.id} has no default queue; name one",
                    offered,
                )
            )
        return queue
    queue = resource.queue(wanted)
    if queue is None:
        problems.append(
            Problem("attributes.queue_name", f"no queue {wanted!r} on {resource.id}", offered)
        )
    return queue


def check_queue_limits(shape: JobShape, queue: Queue, problems: list[Problem]) -> None:
    """Walltime and node count must lie within the queue's limits."""
    walltime = shape.walltime_seconds
    if queue.max_walltime is not None and walltime is not None and walltime > queue.max_walltime:
        problems.append(
            Problem(
                "attributes.duration",
                f"{walltime} s exceeds the {queue.name!r} limit of {queue.max_walltime} s",
                f"at most {queue.max_walltime} s",
            )
        )
    if queue.max_nodes is not None and shape.node_count > queue.max_nodes:
        problems.append(
            Problem(
                "resources.node_count",
                f"{shape.node_count} nodes exceed the {queue.name!r} limit of {queue.max_nodes}",
                f"at most {queue.max_nodes}",
            )
        )
    if shape.node_count < queue.min_nodes:
        problems.append(
            Problem(
                "resources.node_count",
                f"queue {queue.name!r} takes jobs of at least {queue.min_nodes} nodes",
                f"at least {queue.min_nodes}",
            )
        )


def reserve_default_gpus(
    shape: JobShape,
    field: str,
    resource: Resource,
    problems: list[Problem],
    warnings: list[str],
) -> JobShape:
    """GPUs given to the container (at `field`) but not asked of the scheduler follow the
    site's `gpu_default_request`.

    Without it the script would bind GPUs the scheduler never reserved: another job may hold
    them, or the step sees none. 'whole-node' reserves every GPU of each node (what a job
    that says "give me the GPUs" on an exclusive node means); 'refuse' asks the user to say.
    """
    gpus = resource.nodes.gpus
    if shape.gpus_per_process or gpus is None:
        return shape
    if resource.scheduler.gpu_default_request == "refuse":
        problems.append(
            Problem(
                field,
                f"the container is given GPUs but none are reserved; {resource.id} needs "
                "the job to ask for them",
                "resources.gpu_cores_per_process (e.g. 1), or no GPUs "
                "(container.gpu: false and no container.devices)",
            )
        )
        return shape
    warnings.append(
        f"{field}: no resources.gpu_cores_per_process given; {resource.id} reserves every "
        f"GPU of each node ({gpus.count} per node)"
    )
    return replace(shape, whole_node_gpus=gpus.count)
