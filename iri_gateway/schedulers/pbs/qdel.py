"""`qdel`: deleting a job that has already finished is not an error.

For a job in the server's history qdel prints `qdel: Job has finished <id>` and exits 35
(PBSE_HISTJOBID, 15139, modulo 256). Other refusals stay errors with qdel's words: an unknown
id (`qdel: Unknown Job Id <id>`, 153: the id is wrong, or its history has already been purged)
and a job that is exiting (`qdel: Request invalid for state of job <id>`, 168).
"""

from __future__ import annotations

from iri_gateway.errors import CancelError
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.pbs import outage
from iri_gateway.transport.base import CommandResult

HISTORY_JOB_EXIT = 35  # PBSE_HISTJOBID & 0xff
_FINISHED = "Job has finished"


def argv(job_id: str) -> list[str]:
    return ["qdel", job_id]


def elements_argv(job_id: str, indices: ArrayIndices) -> list[str]:
    """Chosen subjobs of array `job_id` (`123[].server`): one `123[5].server` each; a range
    `123[0-9].server` where they are consecutive (qdel takes ranges of subjobs)."""
    head, _, tail = job_id.partition("[]")
    words: list[str] = []
    for first, last, step in indices.runs:
        if step == 1 and last > first:
            words.append(f"{head}[{first}-{last}]{tail}")
        else:
            words.extend(f"{head}[{index}]{tail}" for index in range(first, last + 1, step))
    return ["qdel", *words]


def parse(result: CommandResult) -> None:
    outage.check(result, "cancel")
    finished = result.exit_code == HISTORY_JOB_EXIT or _FINISHED in result.stderr
    if not result.ok and not finished:
        raise CancelError(result.argv, result.exit_code, result.stdout, result.stderr)
