"""`scontrol requeue`: run a batch job again under its id (every het component with it).

slurmctld makes a requeued job wait about two minutes before it is eligible again (its
`BeginTime` is set ahead). The reason: when a run ends, each slurmd revokes the job's
credential, and refuses a launch whose credential was made in the same second or earlier
("Killing non-startable batch JobId=...: Job credential revoked", the job fails at once).
A restart asked for by the user should not wait two minutes, so the adapter waits until
the earlier run has left its nodes (squeue shows every component PENDING, no longer
COMPLETING), lets the clock pass the second of the revocation, and only then clears the
wait with `scontrol update JobId=<id> StartTime=now`. If the earlier run does not leave
its nodes in time, Slurm's own delay stays and the job starts after it.
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


def states_argv(job_id: str) -> list[str]:
    """The state of every component of the job (one line each)."""
    return ["squeue", "-h", "-j", job_id, "-o", "%T"]


def left_its_nodes(result: CommandResult) -> bool:
    """True when every component is PENDING (the earlier run no longer COMPLETING)."""
    states = result.stdout.split()
    return result.ok and bool(states) and all(state == "PENDING" for state in states)


def parse(result: CommandResult) -> None:
    outage.check(result, "restart")
    if not result.ok:
        raise RestartError(result.argv, result.exit_code, result.stdout, result.stderr)
