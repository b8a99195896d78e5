"""The contract every scheduler plug-in fulfils, and helpers they share.

A scheduler is one package in this package whose `__init__` defines `SCHEDULER`, a
`SchedulerPlugin`: the rendering side (template, directive lines, launcher, cluster layout), the
execution side (a factory of its `BatchSystem`: submit, status, cancel, find, update), and the
facts and rules the rest of the gateway asks of it (`models.scheduler_facts.SchedulerFacts`:
one machine, one process, launchers, GPU request forms, what its directives can carry), so
that no module outside this package compares a scheduler's kind. The registry
(`iri_gateway.schedulers.SCHEDULERS`) finds it by the profile's `scheduler.kind`; see
docs/plugins.md.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from iri_gateway.models.job_arrays import ArrayRules
from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation
from iri_gateway.schedulers.batch import BatchSystem
from iri_gateway.schedulers.directive_rules import DirectiveRules
from iri_gateway.shell import SiteWord

if TYPE_CHECKING:
    from iri_gateway.models.profile import SchedulerConfig
    from iri_gateway.transport.base import Transport

STOP_BY_PID: tuple[str, ...] = (
    # Every process of the members: a member's program may itself fork (`sh -c` keeps its
    # child), and TERM to the member's shell alone would leave that grandchild running on
    # after the job (seen on the local scheduler). Walk the tree, then TERM it all at once.
    "local i n=0 child",
    "local -a tree=()",
    'for i in "$@"; do',
    '    tree+=("${iri_pids[i]}")',
    "done",
    "while ((n < ${#tree[@]})); do",
    '    for child in $(pgrep -P "${tree[n]}"); do',
    '        tree+=("$child")',
    "    done",
    "    n=$((n + 1))",
    "done",
    'kill -TERM "${tree[@]}" 2>/dev/null',
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


class BatchFactory(Protocol):
    """Builds the batch system that runs one account's jobs on one resource."""

    def __call__(
        self, *, transport: Transport, config: SchedulerConfig, data_dir: Path
    ) -> BatchSystem:
        """`transport` runs commands as the account, `config` is the resource's scheduler
        block, `data_dir` the gateway's own folder (for a scheduler that keeps state there)."""


def default_gpu_request_only(default: str) -> Callable[[str], str | None]:
    """The GPU request check of a scheduler that knows one form: any other is refused."""

    def refusal(word: str) -> str | None:
        if word == default:
            return None
        return f"gpu_request {word!r} is not a form this scheduler reads; it uses {default!r}"

    return refusal


@dataclass(frozen=True, kw_only=True)
class SchedulerPlugin:
    """A batch system: how its scripts look, how its jobs are submitted and tracked, and the
    facts and rules the rest of the gateway asks of it (`models.scheduler_facts`), so that
    nothing outside this package compares a scheduler's kind."""

    kind: str
    """The profile's `scheduler.kind` that chooses this plug-in, e.g. 'slurm'."""
    template: str
    """The script template (extends base.sh.j2), e.g. 'slurm.sh.j2'."""
    directives: Callable[[Decision, Invocation], list[str]]
    """Complete directive lines (e.g. `#SBATCH --nodes=2`) in a stable order."""
    launcher: Callable[[Decision], list[str]]
    """The command prefix that starts the job's processes (empty: run directly)."""
    cluster_layout: Callable[[Decision], ClusterLayout]
    """Where each member of a cluster job runs and how it is started there."""
    batch_factory: BatchFactory
    """The execution side: submit, status, cancel, find and update through a transport."""

    # Facts: every one is declared by each plug-in; none is guessed from its kind.
    this_machine: bool
    """Jobs run on the gateway's own machine (see `SchedulerFacts.this_machine`)."""
    one_process: bool
    """A job is one process: no launcher starts copies or ranks."""
    parallel_needs_site_launcher: bool
    """Several processes, or a cluster job's members, start only through the site's MPI
    launcher; a resource without `mpi` refuses them."""
    batch_queue: bool
    """Jobs wait in a batch queue shared with other users (IRI's `batch` capability)."""
    gpu_request_default: str
    """The GPU request form used when the profile names none."""
    gpu_request_check: Callable[[str], str | None]
    """Why a profile's `gpu_request` word cannot be used here, or None (see
    `default_gpu_request_only` for a scheduler that knows one form)."""
    offers_oci_containers: bool = False
    """The scheduler starts OCI containers itself (Slurm's `srun --container`)."""
    container_directives: bool = False
    """A runtime's image and volumes may travel as directive lines (Shifter's SPANK)."""
    directive_rules: DirectiveRules = field(default_factory=DirectiveRules)
    """What a directive value may hold; the default refuses all but plain words."""
    arrays: ArrayRules | None = None
    """How it runs job arrays (`models.job_arrays`); None: it does not, and an array is
    refused."""

    def gpu_request_refusal(self, word: str) -> str | None:
        return self.gpu_request_check(word)

    def directive_refusal(self, path: str, value: str) -> str | None:
        return self.directive_rules.refusal(path, value)

    def container_directive_refusal(self, value: str) -> str | None:
        return self.directive_rules.container_option_refusal(value)

    def directive_output_path(self, directory: str | None, path: str) -> str:
        return self.directive_rules.output_path(directory, path)


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
