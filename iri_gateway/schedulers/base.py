"""What every scheduler module provides to the renderer, and helpers they share."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation
from iri_gateway.shell import SiteWord

STOP_BY_PID: tuple[str, ...] = (
    'local i',
    'for i in "$@"; do',
    '    pkill -TERM -P "${iri_pids[i]}" 2>/dev/null',
    '    kill -TERM "${iri_pids[i]}" 2>/dev/null',
    'done',
)


@dataclass(frozen=True)
class ClusterLayout:
    """How a scheduler places and starts the members of a cluster job (see cluster.sh.j2).

    Shell expressions here are written by the gateway (site words): they name the
    scheduler's own variables and the arrays the discovery lines fill.
    """

    job_id: str  # the scheduler's job id inside the job, e.g. ${SLURM_JOB_ID}
    discovery: list[str]  # script lines that find the allocation's hosts
    address: list[str]  # body of iri_address: print host "$1"'s IPv4 address
    hosts: list[SiteWord]  # per member: its host
    launchers: list[list[str]]  # per member: the command prefix starting it on its host
    stop: list[str] = field(default_factory=lambda: list(STOP_BY_PID))
    # body of iri_cluster_stop INDEX...: SIGTERM the members still running




GETENT_ADDRESS = "getent ahostsv4 \"$1\" | awk 'NR == 1 { print $1 }'"


class Scheduler(Protocol):
    """A batch-system plug-in: its template, directive lines and launcher command."""

    name: str
    template: str

    def directives(self, decision: Decision, invocation: Invocation) -> list[str]:
        """Complete directive lines (e.g. `#SBATCH --nodes=2`) in a stable order."""

    def launcher(self, decision: Decision) -> list[str]:
        """The command prefix that starts the job's processes (empty: run directly)."""

    def cluster_layout(self, decision: Decision) -> ClusterLayout:
        """Where each member of a cluster job runs and how it is started there."""


def site_launcher(decision: Decision, default: str) -> list[str]:
    """The site's launcher and its arguments, placeholders filled with the job's counts.

    Placeholders are replaced literally (no str.format), so `${VAR}` in an admin's argument
    stays a shell expansion.
    """
    mpi = decision.resource.resource.mpi
    if mpi is None:
        return [SiteWord(default)]
    shape = decision.shape
    counts = {
        "{nodes}": str(shape.node_count),
        "{processes}": str(shape.process_count),
        "{processes_per_node}": str(shape.processes_on_busiest_node),
        "{cpus_per_process}": str(shape.cpus_per_process or 1),
    }
    words: list[str] = [SiteWord(mpi.launcher)]
    for argument in mpi.launcher_args:
        for placeholder, value in counts.items():
            argument = argument.replace(placeholder, value)
        words.append(SiteWord(argument))
    return words


def hms(seconds: int) -> str:
    """Seconds as H:MM:SS (hours may exceed 24), the form PBS and Slurm both read."""
    minutes, second = divmod(seconds, 60)
    hours, minute = divmod(minutes, 60)
    return f"{hours}:{minute:02d}:{second:02d}"
