"""Tell a Slurm outage from a refusal: the words Slurm's commands print when slurmctld is
down or overloaded.

A failed `sbatch` is a refusal of the job (422) unless Slurm says it could not talk to its
controller; then it is a transient outage (SchedulerUnavailableError, 503 and Retry-After),
whatever the command. The phrases are Slurm's error strings (slurm_errno.c) as the commands
print them, e.g. with slurmctld stopped:

    sbatch: error: Batch job submission failed: Unable to contact slurm controller
        (connect failure)
    scancel: error: Kill job error on job id 42: Unable to contact slurm controller
        (connect failure)
    slurm_load_jobs error: Unable to contact slurm controller (connect failure)

(each on one line, with a non-zero exit status, after about MessageTimeout seconds of
retrying).

Two kinds: the request surely never reached slurmctld (no connection; or slurmctld said
"try again" — EAGAIN — before taking the job), or it may have (the connection broke or
timed out after the request was sent), in which case a submission may have created a job.
"""

from __future__ import annotations

from iri_gateway.errors import SchedulerUnavailableError
from iri_gateway.transport.base import CommandResult

NOT_REACHED = (
    "Unable to contact slurm controller",
    "Slurm temporarily unable to accept job",
    "Resource temporarily unavailable",
)
"""slurmctld could not be connected to, or it refused the request for now (EAGAIN)."""

MAYBE_REACHED = (
    "Socket timed out on send/recv operation",
    "Zero Bytes were transmitted or received",
)
"""The connection failed mid-request: slurmctld may have acted on it."""


def check(result: CommandResult, action: str) -> None:
    """Raise SchedulerUnavailableError when a failed command says slurmctld is unavailable."""
    if result.ok:
        return
    words = f"{result.stderr}\n{result.stdout}".lower()
    # Doubt first: a message with both kinds of words may have reached slurmctld.
    if any(phrase.lower() in words for phrase in MAYBE_REACHED):
        raise SchedulerUnavailableError(
            result.argv, result.exit_code, result.stdout, result.stderr, action=action, reached=True
        )
    if any(phrase.lower() in words for phrase in NOT_REACHED):
        raise SchedulerUnavailableError(
            result.argv,
            result.exit_code,
            result.stdout,
            result.stderr,
            action=action,
            reached=False,
        )
