"""`scancel`: cancelling a job that already ended is not an error."""

from __future__ import annotations

from iri_gateway.errors import CancelError
from iri_gateway.schedulers.slurm import outage
from iri_gateway.transport.base import CommandResult


def argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def parse(result: CommandResult) -> None:
    outage.check(result, "cancel")
    finished = "already completing or completed" in result.stderr.lower()
    if not result.ok and not finished:
        raise CancelError(result.argv, result.exit_code, result.stdout, result.stderr)
