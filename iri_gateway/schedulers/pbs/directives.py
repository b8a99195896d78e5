"""PBS Pro / OpenPBS batch scripts: `#PBS` directives, `select` chunks, `mpiexec`."""

from __future__ import annotations

from iri_gateway.models.job_arrays import INDEX_PATTERN
from iri_gateway.models.plan import Decision, JobShape, role_shape
from iri_gateway.models.profile import Nodes
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers.base import GETENT_ADDRESS, ClusterLayout, hms, site_launcher
from iri_gateway.schedulers.pbs.directive_rules import PbsDirectiveRules
from iri_gateway.shell import SiteWord

_RULES = PbsDirectiveRules()


def _chunk(shape: JobShape, nodes: Nodes) -> str:
    """`N:ncpus=..:mpiprocs=..[:ngpus=..][:mem=..]`: N nodes of one kind."""
    per_node = shape.processes_on_busiest_node
    if shape.cpus_per_process is not None:
        ncpus = shape.cpus_per_process * per_node
    else:
        ncpus = nodes.cpu.cores if shape.exclusive else per_node
    chunk = [str(shape.node_count), f"ncpus={ncpus}", f"mpiprocs={per_node}"]
    if shape.gpus_per_node:
        chunk.append(f"ngpus={shape.gpus_per_node}")
    if shape.memory_mib is not None:
        chunk.append(f"mem={shape.memory_mib}mb")
    return ":".join(chunk)


def _select(decision: Decision) -> str:
    """One chunk kind, or for a cluster job one per role joined with `+`, in role order."""
    nodes = decision.resource.resource.nodes
    cluster = decision.cluster
    shapes = [decision.shape] if cluster is None else [role_shape(r) for r in cluster.roles]
    return "select=" + "+".join(_chunk(shape, nodes) for shape in shapes)


def directives(decision: Decision, invocation: Invocation) -> list[str]:
    spec, shape = decision.spec, decision.shape
    attributes = spec.attributes
    lines: list[str] = []
    if spec.name:
        lines.append(f"#PBS -N {spec.name}")
    queue = decision.queue
    if attributes and attributes.reservation_id:
        lines.append(f"#PBS -q {attributes.reservation_id}")
    elif queue is not None:
        lines.append(f"#PBS -q {queue.name}")
    if attributes and attributes.account:
        lines.append(f"#PBS -A {attributes.account}")
    lines.append(f"#PBS -l {_select(decision)}")
    lines.append(f"#PBS -l place=scatter{':excl' if shape.exclusive else ''}")
    if shape.walltime_seconds is not None:
        lines.append(f"#PBS -l walltime={hms(shape.walltime_seconds)}")
    if spec.stdout_path:
        lines.append(f"#PBS -o {_output_path(decision, spec.stdout_path)}")
    if spec.stderr_path:
        lines.append(f"#PBS -e {_output_path(decision, spec.stderr_path)}")
    elif spec.stdout_path:
        lines.append("#PBS -j oe")
    if spec.array is not None:
        # The real OpenPBS 23.06.06 takes `-J 0-10:2%2` and sets the array's max_run_subjobs
        # to 2: two of its subjobs run at a time (tests/data/pbs/real-array-throttled.json).
        first, last, step = spec.array.elements().runs[0]  # one range: negotiation's rule
        indices = f"{first}-{last}" if step == 1 else f"{first}-{last}:{step}"
        throttle = spec.array.max_concurrent
        lines.append(f"#PBS -J {indices}%{throttle}" if throttle else f"#PBS -J {indices}")
    if spec.inherit_environment:
        lines.append("#PBS -V")
    if attributes:
        for key, value in attributes.custom_attributes.items():
            lines.append(f"#PBS -l {key}={value}")
    lines += [f"#PBS {directive}" for directive in decision.resource.resource.scheduler.directives]
    return lines


def _output_path(decision: Decision, path: str) -> str:
    """`path` for `-o`/`-e` (see `PbsDirectiveRules.output_path`), an array's `%a` as PBS's
    own `^array_index^`."""
    written = _RULES.output_path(decision.spec.directory, path)
    if decision.spec.array is None:
        return written
    rules = decision.resource.resource.scheduler.facts.arrays
    assert rules is not None  # negotiation refused the array otherwise
    return written.replace(INDEX_PATTERN, rules.output_index)


def launcher(decision: Decision) -> list[str]:
    if decision.launcher == "none":
        return []
    return site_launcher(decision, "mpiexec")


def cluster_layout(decision: Decision) -> ClusterLayout:
    """Members start on their host through the site's mpiexec, one process each.

    `$PBS_NODEFILE` lists each chunk's hosts in select order, every host `mpiprocs` times
    (the role's members per node), even the last host of a role that it does not fill: so a
    role's lines start after all the lines of the roles before it, and its member k is the
    role's line k.
    """
    cluster = decision.cluster
    mpi = decision.resource.resource.mpi
    assert cluster is not None and mpi is not None
    first_line: list[int] = []
    lines = 0
    for shape in (role_shape(role) for role in cluster.roles):  # as _chunk asks for them
        first_line.append(lines)
        lines += shape.node_count * shape.processes_on_busiest_node
    hosts: list[SiteWord] = []
    launchers: list[list[str]] = []
    for member in cluster.members:
        line = first_line[member.role_number] + member.slot
        host = SiteWord(f"${{iri_hosts[{line}]}}")
        hosts.append(host)
        launchers.append([SiteWord(mpi.launcher), "-n", "1", "--hosts", host])
    return ClusterLayout(
        "${PBS_JOBID}",
        ['mapfile -t iri_hosts < "$PBS_NODEFILE"'],
        [GETENT_ADDRESS],
        hosts,
        launchers,
    )
