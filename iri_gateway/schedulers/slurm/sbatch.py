"""`sbatch --parsable`: the script on stdin, the gateway's tag as the job comment."""

from __future__ import annotations

import re

from iri_gateway.errors import SubmitError
from iri_gateway.schedulers.slurm import outage
from iri_gateway.transport.base import CommandResult

_JOB_ID = re.compile(r"^(\d+)(?:;\S+)?$")


def argv(tag: str) -> list[str]:
    """sbatch reads the script from stdin when no file is named."""
    return ["sbatch", "--parsable", f"--comment={tag}"]


def parse(result: CommandResult) -> str:
    """The job id from `jobid[;cluster]`; SubmitError with Slurm's words otherwise
    (SchedulerUnavailableError when slurmctld could not be reached: not the job's fault)."""
    outage.check(result, "submission")
    if not result.ok:
        raise SubmitError(result.argv, result.exit_code, result.stdout, result.stderr)
    lines = result.stdout.strip().splitlines()
    match = _JOB_ID.match(lines[-1].strip()) if lines else None
    if match is None:
        raise SubmitError(
            result.argv,
            result.exit_code,
            result.stdout,
            result.stderr,
            hint="sbatch printed no job id",
        )
    return match.group(1)
