"""`qrerun`: stop a running PBS job and put it back in its queue, under the same id.

PBS reruns running jobs only, and only for a manager or operator. The real OpenPBS 23.06.06
answers a finished job `qrerun: Job has finished` (35, without the id), a queued one
`qrerun: Request invalid for state of job <id>` (168), a job submitted with `-r n`
`qrerun: job is not rerunnable <id>` (190), a user `qrerun: Unauthorized Request  <id>` (159);
each refusal is kept in qrerun's own words (tests/integration/test_pbs_batch.py).
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
