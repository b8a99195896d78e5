"""Cluster jobs: several roles of members in one scheduler job (docs/design.md Contract 1, `roles`).

Every role is negotiated as the job one of its members runs: the top-level JobSpec with the
role's own fields on top (environment, mounts and extra options merged, the role's last), one
process on one node. Then the roles are checked together: the resource must run cluster jobs
and hold every role's nodes at once, and the runtime must let members find each other by
name (the gateway binds a hosts file at /etc/hosts, which Shifter cannot).

The decision returned is the primary member's (first member of the first role) with the
whole cluster attached; the renderer lays out one launch per member from it.
"""

from __future__ import annotations

from collections.abc import Callable

from iri_gateway.errors import JobRejectedError, Problem
from iri_gateway.models import cluster_ports
from iri_gateway.models.jobspec import Container, JobSpec, ResourceSpec, Role, VolumeMount
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.models.plan import ClusterDecision, Decision, Member, RoleDecision
from iri_gateway.planning.negotiate.flavours import FlavourChoice
from iri_gateway.runtimes import RUNTIMES

CLUSTER_VARIABLES = (
    "IRI_CLUSTER_ROLE",
    "IRI_CLUSTER_ROLE_INDEX",
    "IRI_CLUSTER_SIZE",
    "IRI_CLUSTER_HOSTS",
    cluster_ports.ENDPOINTS_VARIABLE,
)

Negotiator = Callable[[JobSpec, LoadedResource], Decision]


def member_names(roles: list[Role]) -> list[Member]:
    """Every member in order: `master1`, `worker1`, `worker2`, ... (no zero padding)."""
    return [
        Member(f"{role.name}{index}", role.name, index, number, index - 1)
        for number, role in enumerate(roles)
        for index in range(1, role.count + 1)
    ]


def _container(spec: JobSpec, role: Role) -> Container | None:
    """The job's container with the role's settings on top (image < job < role); a role
    setting given as null leaves the job's (a 500 when the job's field takes no null)."""
    base, own = spec.container, role.container
    if own is None:
        return base
    merged = base.model_dump(exclude_unset=True) if base is not None else {}
    if "image" in own.model_fields_set and "flavours" not in own.model_fields_set:
        merged.pop("flavours", None)  # the role's image replaces the job's flavours
    for name in own.model_fields_set - {"volume_mounts", "extra_options"}:
        if getattr(own, name) is not None:
            merged[name] = getattr(own, name)
    if merged.get("flavours") is None:
        merged.pop("flavours", None)
    mounts = {m.target: m for m in (base.volume_mounts if base else [])}
    mounts.update({m.target: m for m in own.volume_mounts})
    merged["volume_mounts"] = [VolumeMount.model_validate(m.model_dump()) for m in mounts.values()]
    options = {k: list(v) for k, v in (base.extra_options if base else {}).items()}
    for runtime, values in own.extra_options.items():
        options[runtime] = options.get(runtime, []) + list(values)
    merged["extra_options"] = options
    if merged.get("image") is None:
        merged.pop("image", None)
    return Container.model_validate({**(own.model_extra or {}), **merged})


def _resources(spec: JobSpec, role: Role) -> ResourceSpec:
    """One member's share: the role's resources, else the job's, on one node."""
    job = spec.resources or ResourceSpec()
    own = role.resources or ResourceSpec()

    mine = own.model_fields_set
    return ResourceSpec.model_construct(
        node_count=1,
        process_count=1,
        processes_per_node=None,
        cpu_cores_per_process=(
            own if "cpu_cores_per_process" in mine else job
        ).cpu_cores_per_process,
        gpu_cores_per_process=(
            own if "gpu_cores_per_process" in mine else job
        ).gpu_cores_per_process,
        memory=(own if "memory" in mine else job).memory,
        exclusive_node_use=(own if "exclusive_node_use" in mine else job).exclusive_node_use,
    )


def member_spec(spec: JobSpec, role: Role, cluster_env: dict[str, str]) -> JobSpec:
    """The job one member of `role` runs (its index is set per member when rendering)."""
    executable = role.executable or spec.executable
    if role.arguments is not None:
        arguments = list(role.arguments)
    else:
        arguments = list(spec.arguments) if role.executable is None else []
    return spec.model_copy(
        update={
            "executable": executable,
            "arguments": arguments,
            "container": _container(spec, role),
            "environment": {**spec.environment, **role.environment, **cluster_env},
            "resources": _resources(spec, role),
            "roles": None,
        }
    )


def _origin(field: str, role: Role, where: str) -> str:
    """A member's problem points at the role's field when the role set it, else the job's."""
    head, _, rest = field.partition(".")
    top = head.split("[", 1)[0]
    if top == "container" and role.container is not None:
        sub = rest.split(".", 1)[0].split("[", 1)[0]
        if sub in role.container.model_fields_set:
            return f"{where}.{field}"
    elif top in ("executable", "arguments", "environment", "resources") and (
        top in role.model_fields_set
    ):
        return f"{where}.{field}"
    return field


def negotiate_roles(spec: JobSpec, loaded: LoadedResource, negotiate_one: Negotiator) -> Decision:
    """The primary member's decision with the whole cluster; JobRejectedError lists all."""
    roles = spec.roles or []
    resource = loaded.resource
    limits = resource.scheduler.cluster_jobs
    problems: list[Problem] = []
    members = member_names(roles)
    if not limits.enabled:
        problems.append(
            Problem("roles", f"{resource.id} does not run cluster jobs", "a job without roles")
        )
    if len(roles) > limits.max_roles:
        problems.append(
            Problem(
                "roles",
                f"{len(roles)} roles; {resource.id} runs at most {limits.max_roles}",
                f"at most {limits.max_roles}",
            )
        )
    if len(members) > limits.max_members:
        problems.append(
            Problem(
                "roles",
                f"{len(members)} members; {resource.id} runs at most {limits.max_members}",
                f"at most {limits.max_members}",
            )
        )
    if spec.launcher not in (None, "single"):
        problems.append(
            Problem(
                "launcher",
                "every member of a cluster job is one process; a "
                "launcher spanning members is not supported",
                "single",
            )
        )
    if resource.scheduler.facts.parallel_needs_site_launcher and resource.mpi is None:
        problems.append(
            Problem(
                "roles", f"{resource.id} has no launcher (mpiexec) to start members on their hosts"
            )
        )
    for where, environment in [("environment", spec.environment)] + [
        (f"roles[{number}].environment", role.environment) for number, role in enumerate(roles)
    ]:
        for name in environment:
            if name in CLUSTER_VARIABLES or name.startswith(cluster_ports.PORT_VARIABLE_PREFIX):
                problems.append(Problem(f"{where}.{name}", "set by the gateway in cluster jobs"))
    ports = cluster_ports.all_member_ports((r.name, r.count, r.ports) for r in roles)
    cluster_env = {
        "IRI_CLUSTER_SIZE": str(len(members)),
        "IRI_CLUSTER_HOSTS": ",".join(m.name for m in members),
    }
    if ports:
        cluster_env[cluster_ports.ENDPOINTS_VARIABLE] = cluster_ports.endpoints(ports)
    decisions: list[RoleDecision] = []
    binding: set[str] = set()  # runtimes that bind the hosts file into a member's container
    seen: set[tuple[str, str]] = set()
    for number, role in enumerate(roles):
        where = f"roles[{number}]"
        if (
            role.container is not None
            and role.container.image is None
            and (not role.container.flavours)
            and (
                spec.container is None
                or (spec.container.image is None and not spec.container.flavours)
            )
        ):
            problems.append(
                Problem(
                    f"{where}.container.image",
                    f"role {role.name!r}: neither the role nor the job names an image",
                )
            )
            continue
        env = {
            **cluster_env,
            "IRI_CLUSTER_ROLE": role.name,
            "IRI_CLUSTER_ROLE_INDEX": "1",
            **cluster_ports.port_variables(cluster_ports.member_ports(role.ports, 1)),
        }
        member = member_spec(spec, role, env)
        binding.update(_container_runtime(member.container, loaded))
        try:
            if member.container is not None and member.container.flavours:
                # Each role chooses its own flavour: its members' hardware and runtime.
                choice = FlavourChoice(member, member.container, _members_per_node(spec, role))
                decision = choice.decide(loaded, negotiate_one)
            else:
                decision = negotiate_one(member, loaded)
        except JobRejectedError as error:
            for problem in error.problems:
                # A problem of the role's own field names the role; one of a field the role
                # inherits is the job's, reported once whichever roles share it.
                field = _origin(problem.field, role, where)
                reason = problem.reason
                if field.startswith("roles["):
                    reason = f"role {role.name!r}: {reason}"
                moved = Problem(field, reason, problem.offered)
                if (moved.field, moved.reason) not in seen:
                    seen.add((moved.field, moved.reason))
                    problems.append(moved)
            continue
        if not RUNTIMES[decision.runtime].binds_hosts_file:
            problems.append(
                Problem(
                    _origin("container.runtime", role, where),
                    f"role {role.name!r}: {decision.runtime} cannot bind the members' hosts file "
                    "at /etc/hosts, so members could not find each other by name",
                    ", ".join(
                        n
                        for n in [*resource.runtimes.available(), "none"]
                        if RUNTIMES[n].binds_hosts_file
                    ),
                )
            )
        if decision.network == "none" and len(members) > 1:
            decision.warnings.append(
                f"role {role.name!r} has network 'none': its members cannot reach the others"
            )
        decisions.append(_place(role, number, decision, spec, problems))
    _check_hosts_bind(spec, binding, problems)
    _check_totals(decisions, loaded, problems)
    if problems:
        raise JobRejectedError(resource.id, problems)
    primary = decisions[0].decision
    primary.cluster = ClusterDecision(
        decisions, members, ports, spec.cluster_lifecycle or "primary_ends_all"
    )
    for role_decision in decisions[1:]:
        primary.warnings.extend(
            w for w in role_decision.decision.warnings if w not in primary.warnings
        )
    return primary


def _members_per_node(spec: JobSpec, role: Role) -> int:
    """How many of the role's members share a node: the role's or the job's figure, else 1."""
    job = spec.resources or ResourceSpec()
    own = role.resources or ResourceSpec()
    return own.processes_per_node or job.processes_per_node or 1


def _place(
    role: Role,
    number: int,
    decision: Decision,
    spec: JobSpec,
    problems: list[Problem],
) -> RoleDecision:
    """How many of the role's members share a node, and how many nodes it takes."""
    where = f"roles[{number}].resources"
    own = role.resources or ResourceSpec()
    per_node = _members_per_node(spec, role)
    one_host = decision.resource.resource.scheduler.facts.this_machine
    if one_host:
        per_node = role.count  # one host: every member runs on it
    node_count = -(-role.count // per_node)
    asked = own.node_count if own.node_count is not None else None
    if asked is not None and asked != node_count:
        problems.append(
            Problem(
                f"{where}.node_count",
                f"{role.count} members at {per_node} per node take {node_count} nodes, not {asked}",
                str(node_count),
            )
        )
    if own.process_count is not None and own.process_count != role.count:
        problems.append(
            Problem(
                f"{where}.process_count",
                f"each member is one process; count is {role.count}",
                str(role.count),
            )
        )
    nodes = decision.resource.resource.nodes
    shape = decision.shape
    if (
        shape.gpus_per_process
        and nodes.gpus is not None
        and (shape.gpus_per_process * per_node > nodes.gpus.count)
    ):
        problems.append(
            Problem(
                f"{where}.gpu_cores_per_process",
                f"{per_node} members per node x {shape.gpus_per_process} GPUs exceed the "
                f"{nodes.gpus.count} GPUs of a node",
                f"at most {nodes.gpus.count // per_node}",
            )
        )
    if shape.whole_node_gpus and per_node > 1:
        problems.append(
            Problem(
                f"{where}.gpu_cores_per_process",
                f"role {role.name!r}: its members are given GPUs without a count, which reserves a "
                f"whole node's GPUs for each, but {per_node} members share a node",
                f"at most {shape.whole_node_gpus // per_node} per member"
                if shape.whole_node_gpus >= per_node
                else "one member per node",
            )
        )
    cpus = shape.cpus_per_process or 1
    if not one_host and cpus * per_node > nodes.cpu.cores:
        problems.append(
            Problem(
                f"{where}.processes_per_node",
                f"{per_node} members per node x {cpus} cores exceed the {nodes.cpu.cores} cores "
                "of a node",
                f"at most {max(1, nodes.cpu.cores // cpus)}",
            )
        )
    return RoleDecision(role.name, role.count, per_node, node_count, decision)


def _container_runtime(container: Container | None, loaded: LoadedResource) -> set[str]:
    """The runtime a member's container runs in ({} without one, or 'none')."""
    if container is None:
        return set()
    wanted = container.runtime or loaded.resource.runtimes.default
    return {wanted} if loaded.resource.runtimes.get(wanted) is not None else set()


def _check_hosts_bind(spec: JobSpec, runtimes: set[str], problems: list[Problem]) -> None:
    """Containers bind the hosts file from the cluster folder in the job directory; a bind
    (`SRC:DST:OPTS`, Apptainer's also split at ',') cannot carry ':' or ',' in SRC."""
    directory = spec.directory
    if not runtimes or directory is None or not any(c in directory for c in ":,"):
        return
    if any(p.field == "directory" for p in problems):
        return  # already refused (podman binds the job directory itself)
    problems.append(
        Problem(
            "directory",
            f"{', '.join(sorted(runtimes))} binds the members' hosts file from the "
            "job directory and cannot express ':' or ',' in its path",
            "a directory without ':' or ','",
        )
    )


def _check_totals(
    decisions: list[RoleDecision], loaded: LoadedResource, problems: list[Problem]
) -> None:
    """All roles run at once: their nodes together must fit the resource and the queue."""
    if not decisions or loaded.resource.scheduler.facts.this_machine:
        return
    total = sum(d.node_count for d in decisions)
    available = loaded.resource.nodes.count
    if total > available:
        problems.append(
            Problem(
                "roles",
                f"the roles take {total} nodes together; {loaded.id} has {available}",
                f"at most {available}",
            )
        )
    queue = decisions[0].decision.queue
    if queue is not None and queue.max_nodes is not None and total > queue.max_nodes:
        problems.append(
            Problem(
                "roles",
                f"the roles take {total} nodes together; queue "
                f"{queue.name!r} allows {queue.max_nodes}",
                f"at most {queue.max_nodes}",
            )
        )
