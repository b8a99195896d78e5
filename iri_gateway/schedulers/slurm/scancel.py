"""`scancel`: cancelling a job that already ended is not an error."""

from __future__ import annotations

from iri_gateway.errors import CancelError
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.slurm import outage
from iri_gateway.transport.base import CommandResult


def argv(job_id: str) -> list[str]:
    return ["scancel", job_id]


def elements_argv(job_id: str, indices: ArrayIndices) -> list[str]:
    """Chosen elements of array `job_id`: `scancel 123_[0-9,12,14]` (runs with a step are
    written element by element: the expression takes ranges and single indices)."""
    parts: list[str] = []
    for first, last, step in indices.runs:
        if step == 1 and last > first:
            parts.append(f"{first}-{last}")
        else:
            parts.extend(str(index) for index in range(first, last + 1, step))
    return ["scancel", f"{job_id}_[{','.join(parts)}]"]


def parse(result: CommandResult) -> None:
    outage.check(result, "cancel")
    finished = "already completing or completed" in result.stderr.lower()
    if not result.ok and not finished:
        raise CancelError(result.argv, result.exit_code, result.stdout, result.stderr)
