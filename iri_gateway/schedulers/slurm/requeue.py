"""`scontrol requeue`: run a batch job again under its id (every het component with it).

slurmctld makes a requeued job wait about two minutes before it is eligible again (its
`BeginTime` is set ahead); a restart asked for by the user should start as soon as nodes
are free, so a second command, `scontrol update JobId=<id> StartTime=now`, clears the wait.
Slurm requeues running, suspended and finished jobs it still holds (`MinJobAge`); a job it
has forgotten gets `Invalid job id specified`, kept as Slurm says it.
"""

from __future__ import annotations

from iri_gateway.errors import RestartError
from iri_gateway.schedulers.slurm import outage
from iri_gateway.transport.base import CommandResult


def argv(job_id: str) -> list[str]:
    return ["scontrol", "requeue", job_id]


def release_argv(job_id: str) -> list[str]:
    return ["scontrol", "update", f"JobId={job_id}", "StartTime=now"]


def parse(result: CommandResult) -> None:
    outage.check(result, "restart")
    if not result.ok:
        raise RestartError(result.argv, result.exit_code, result.stdout, result.stderr)
