"""`scontrol update`: the IRI update operation on a queued job."""

from __future__ import annotations

from iri_gateway.errors import UpdateError
from iri_gateway.schedulers.base import hms
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.slurm import outage
from iri_gateway.transport.base import CommandResult


def argv(job_id: str, changes: JobChanges) -> list[str]:
    words = ["scontrol", "update", f"JobId={job_id}"]
    if changes.duration is not None:
        words.append(f"TimeLimit={hms(changes.duration)}")
    if changes.queue_name is not None:
        words.append(f"Partition={changes.queue_name}")
    if changes.name is not None:
        words.append(f"JobName={changes.name}")
    if changes.account is not None:
        words.append(f"Account={changes.account}")
    return words


def parse(result: CommandResult) -> None:
    outage.check(result, "update")
    if not result.ok:
        raise UpdateError(result.argv, result.exit_code, result.stdout, result.stderr)
