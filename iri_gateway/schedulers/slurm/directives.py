"""Slurm batch scripts: `#SBATCH` directives and `srun` as the launcher."""

from __future__ import annotations

from iri_gateway.models.job_arrays import INDEX_PATTERN
from iri_gateway.models.plan import Decision, JobShape, role_shape
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers.base import ClusterLayout, hms, site_launcher
from iri_gateway.shell import SiteWord, slurm_directive_value, slurm_filename


def _line(option: str, value: str | int | None = None) -> str:
    if value is None:
        return f"#SBATCH --{option}"
    if isinstance(value, int):
        return f"#SBATCH --{option}={value}"
    return f"#SBATCH --{option}={slurm_directive_value(value)}"


def _output_path(decision: Decision, path: str) -> str:
    """`path` for `--output`/`--error`: every `%` literal, except an array's `%a` (each
    element's index, Slurm's own `%a`)."""
    if decision.spec.array is None:
        return slurm_filename(path)
    return "%a".join(slurm_filename(piece) for piece in path.split(INDEX_PATTERN))


def _component(decision: Decision, shape: JobShape) -> list[str]:
    """The lines that size one job (or one component of a heterogeneous job)."""
    spec = decision.spec
    resource = decision.resource.resource
    attributes = spec.attributes
    lines: list[str] = []
    queue = decision.queue
    if queue is not None:
        lines.append(_line(queue.select_by, queue.name))
        if queue.constraint:
            lines.append(_line("constraint", queue.constraint))
    if attributes and attributes.account:
        lines.append(_line("account", attributes.account))
    if attributes and attributes.reservation_id:
        lines.append(_line("reservation", attributes.reservation_id))
    lines.append(_line("nodes", shape.node_count))
    lines.append(_line("ntasks", shape.process_count))
    if shape.processes_per_node is not None:
        lines.append(_line("ntasks-per-node", shape.processes_per_node))
    if shape.cpus_per_process is not None:
        lines.append(_line("cpus-per-task", shape.cpus_per_process))
    if shape.gpus_per_node:
        style = resource.scheduler.gpu_request_style
        if style == "gres":
            lines.append(_line("gres", f"gpu:{shape.gpus_per_node}"))
        elif style == "gpus-per-task" and not shape.whole_node_gpus:
            lines.append(_line("gpus-per-task", shape.gpus_per_process))
        else:  # gpus-per-node, and a whole node's GPUs, which no per-task figure expresses
            lines.append(_line("gpus-per-node", shape.gpus_per_node))
    if shape.memory_mib is not None:
        lines.append(_line("mem", f"{shape.memory_mib}M"))
    if shape.walltime_seconds is not None:
        days, rest = divmod(shape.walltime_seconds, 86400)
        lines.append(_line("time", f"{days}-{hms(rest):0>8}" if days else hms(rest)))
    if shape.exclusive:
        lines.append(_line("exclusive"))
    return lines


def directives(decision: Decision, invocation: Invocation) -> list[str]:
    """Job-wide lines, then the sizing; a cluster job gets one `hetjob` component per role."""
    spec = decision.spec
    resource = decision.resource.resource
    attributes = spec.attributes
    lines: list[str] = []
    if spec.name:
        lines.append(_line("job-name", spec.name))
    if spec.directory:
        lines.append(_line("chdir", spec.directory))
    if spec.stdout_path:
        lines.append(_line("output", _output_path(decision, spec.stdout_path)))
    if spec.stderr_path:
        lines.append(_line("error", _output_path(decision, spec.stderr_path)))
    if spec.array is not None:
        throttle = spec.array.max_concurrent
        indices = spec.array.elements().text()
        lines.append(_line("array", f"{indices}%{throttle}" if throttle else indices))
    cluster = decision.cluster
    shapes = [decision.shape] if cluster is None else [role_shape(r) for r in cluster.roles]
    lines += _component(decision, shapes[0])
    if not spec.inherit_environment:
        lines.append(_line("export", "NONE"))
    if attributes:
        # An empty value is an option without one (`hold`, `requeue`): sbatch refuses
        # `--hold=""`.
        for key, value in attributes.custom_attributes.items():
            lines.append(_line(key, value or None))
    for option, value in invocation.scheduler_options:
        lines.append(_line(option, value))
    site = [f"#SBATCH {directive}" for directive in resource.scheduler.directives]
    lines += site
    for shape in shapes[1:]:
        lines.append("#SBATCH hetjob")
        lines += _component(decision, shape) + site
    return lines


def _step_gpus(decision: Decision, gpus: int) -> str:
    """A one-task step's GPUs, in the request style the site uses."""
    style = decision.resource.resource.scheduler.gpu_request_style
    if style == "gres":
        return f"--gres=gpu:{gpus}"
    return f"--gpus-per-task={gpus}" if style == "gpus-per-task" else f"--gpus={gpus}"


def cluster_layout(decision: Decision) -> ClusterLayout:
    """Each role is a het group; a member runs as a one-task step on its slot's node.

    Slurm lists a component's nodes in `SLURM_JOB_NODELIST_HET_GROUP_<n>` (a job of one
    role is not heterogeneous and has only `SLURM_JOB_NODELIST`); members fill the nodes in
    order, `per_node` to a node. A node's address is its `NodeAddr`, resolved if it is a
    name.
    """
    cluster = decision.cluster
    assert cluster is not None
    several = len(cluster.roles) > 1
    discovery = []
    for number in range(len(cluster.roles)):
        variable = f"SLURM_JOB_NODELIST_HET_GROUP_{number}" if several else "SLURM_JOB_NODELIST"
        discovery.append(
            f'mapfile -t iri_nodes_{number} < <(scontrol show hostnames "${{{variable}}}")'
        )
    hosts: list[SiteWord] = []
    launchers: list[list[str]] = []
    for member in cluster.members:
        role = cluster.roles[member.role_number]
        host = SiteWord(f"${{iri_nodes_{member.role_number}[{member.slot // role.per_node}]}}")
        hosts.append(host)
        words: list[str] = [SiteWord("srun")]
        if several:
            words.append(f"--het-group={member.role_number}")
        words += ["--nodes=1", "--ntasks=1", SiteWord(f"--nodelist={host}")]
        shape = role.decision.shape
        if shape.cpus_per_process is not None:
            words.append(f"--cpus-per-task={shape.cpus_per_process}")
        if shape.gpus_per_process or shape.whole_node_gpus:
            words.append(_step_gpus(decision, shape.gpus_per_process or shape.whole_node_gpus))
        # Members sharing a node are separate steps: each takes only what it asks for.
        words.append("--exact")
        launchers.append(words)
    address = [
        "local address",
        'address=$(scontrol show node -o "$1" 2>/dev/null'
        " | sed -n 's/.*NodeAddr=\\([^ ]*\\).*/\\1/p')",
        "getent ahostsv4 \"${address:-$1}\" | awk 'NR == 1 { print $1 }'",
    ]
    # A signal to srun makes it kill its step at once (SIGKILL), which leaves a container
    # whose podman client dies behind; scancel --signal reaches the tasks themselves.
    stop = ['scancel --signal=TERM "$SLURM_JOB_ID"']
    return ClusterLayout("${SLURM_JOB_ID}", discovery, address, hosts, launchers, stop)


def launcher(decision: Decision) -> list[str]:
    if decision.launcher == "none":
        return []
    if decision.launcher == "parallel":
        return site_launcher(decision, "srun")[:1]
    return site_launcher(decision, "srun")
