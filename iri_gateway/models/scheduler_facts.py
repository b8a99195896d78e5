"""What a profile's validation, negotiation and the runtimes ask of a resource's scheduler.

The answers belong to the scheduler plug-ins (`iri_gateway/schedulers/`, each a
`SchedulerPlugin`), which import the models; the models cannot import them back without a
circle. So the models name here only the questions (`SchedulerFacts`, a protocol every
plug-in fulfils), and whoever validates a profile hands the registry of plug-ins in as
pydantic's validation context (`scheduler_context`). A profile validated without it is a
programming error, raised as such: a scheduler kind is never answered by a guess.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from iri_gateway.models.job_arrays import ArrayRules

CONTEXT_KEY = "schedulers"


class SchedulerFacts(Protocol):
    """A batch system's facts and rules, as declared by its plug-in (see docs/plugins.md)."""

    @property
    def kind(self) -> str:
        """The profile's `scheduler.kind` naming it, e.g. 'slurm'."""

    @property
    def this_machine(self) -> bool:
        """Jobs run on the gateway's own machine: one node, whose hardware can be measured
        (`nodes.detect`), whose runtimes are those installed here, and whose members all
        share that one host."""

    @property
    def one_process(self) -> bool:
        """A job is one process: no launcher starts copies or ranks."""

    @property
    def parallel_needs_site_launcher(self) -> bool:
        """Several processes (or a cluster job's members on their hosts) start only through
        the site's MPI launcher (`mpi` in the profile); without one they are refused."""

    @property
    def batch_queue(self) -> bool:
        """Jobs wait in a batch queue shared with other users (IRI's `batch` capability)."""

    @property
    def offers_oci_containers(self) -> bool:
        """The scheduler itself starts OCI containers (Slurm's `srun --container`)."""

    @property
    def container_directives(self) -> bool:
        """A runtime's image and volumes may travel as directive lines (Shifter's SPANK
        options `#SBATCH --image`, `--volume`)."""

    @property
    def arrays(self) -> ArrayRules | None:
        """How it runs job arrays; None when it does not."""

    @property
    def gpu_request_default(self) -> str:
        """The GPU request form used when the profile names none."""

    def gpu_request_refusal(self, word: str) -> str | None:
        """Why `scheduler.gpu_request: word` cannot be used with this scheduler, or None."""

    def directive_refusal(self, path: str, value: str) -> str | None:
        """Why the JobSpec value at `path` cannot be written into a directive line, or None."""

    def container_directive_refusal(self, value: str) -> str | None:
        """Why a runtime option value cannot travel as a directive line, or None."""

    def directive_output_path(self, directory: str | None, path: str) -> str:
        """`stdout_path`/`stderr_path` as its directive line carries it (PBS: joined to a
        relative path's directory), the text `directive_refusal` must judge."""


def scheduler_context(schedulers: Mapping[str, SchedulerFacts]) -> dict[str, Any]:
    """The validation context a facility profile is validated with."""
    return {CONTEXT_KEY: schedulers}


def schedulers_of(context: Any) -> Mapping[str, SchedulerFacts]:
    """The plug-ins handed in by `scheduler_context`; a missing context is a caller's bug."""
    if isinstance(context, dict):
        schedulers = context.get(CONTEXT_KEY)
        if isinstance(schedulers, Mapping):
            return schedulers
    raise RuntimeError(
        "a facility profile is validated with the scheduler plug-ins: "
        "model_validate(data, context=scheduler_context(SCHEDULERS))"
    )
