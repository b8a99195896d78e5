"""`qrerun`: stop a running PBS job and put it back in its queue, under the same id.

PBS reruns running jobs only: a finished one answers `qrerun: Job has finished <id>` (35),
a queued one `Request invalid for state of job` (168), a job submitted with `-r n`
`Job is not rerunnable` (192); each refusal is kept in qrerun's own words.
"""

from __future__ import annotations

from iri_gateway.errors import RestartError
from iri_gateway.schedulers.pbs import outage
from iri_gateway.transport.base import CommandResult


def argv(job_id: str) -> list[str]:
    return ["qrerun", job_id]


def parse(result: CommandResult) -> None:
    outage.check(result, "restart")
    if not result.ok:
        raise RestartError(result.argv, result.exit_code, result.stdout, result.stderr)
