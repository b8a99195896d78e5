"""What every scheduler module provides to the renderer, and helpers they share."""

from __future__ import annotations

from typing import Protocol

from iri_gateway.models.plan import Decision
from iri_gateway.runtimes.base import Invocation
from iri_gateway.shell import SiteWord


class Scheduler(Protocol):
    """A batch-system plug-in: its template, directive lines and launcher command."""

    name: str
    template: str

    def directives(self, decision: Decision, invocation: Invocation) -> list[str]:
        """Complete directive lines (e.g. `#SBATCH --nodes=2`) in a stable order."""

    def launcher(self, decision: Decision) -> list[str]:
        """The command prefix that starts the job's processes (empty: run directly)."""


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
