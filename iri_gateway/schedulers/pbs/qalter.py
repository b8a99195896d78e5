"""The IRI update operation on a queued job: `qalter` for its attributes, `qmove` for its queue.

qalter(1B) changes the walltime (`-l walltime=H:MM:SS`), the name (`-N`) and the account
(`-A`); it has no queue option (its getopt string is `a:A:c:e:h:j:k:l:m:M:N:o:p:r:R:S:u:W:P:`):
a job changes queue with `qmove destination job_id`. The attributes are altered first, then the
job is moved; if the move is refused the attributes stay altered, and the UpdateError names the
command that failed. Refusals keep the commands' own words (`<command>: <server message>
<job id>`), for example `qalter: Cannot modify attribute while job running  <attribute> <id>`
(exit 167, PBSE_MODATRRUN) or `qmove: Unknown queue <id>` (170, PBSE_UNKQUE).
"""

from __future__ import annotations

from iri_gateway.errors import UpdateError
from iri_gateway.schedulers.base import hms
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.pbs import outage
from iri_gateway.transport.base import CommandResult


def argv(job_id: str, changes: JobChanges) -> list[str] | None:
    """qalter for the walltime, name and account; None when none of them changes."""
    words = ["qalter"]
    if changes.duration is not None:
        words += ["-l", f"walltime={hms(changes.duration)}"]
    if changes.name is not None:
        words += ["-N", changes.name]
    if changes.account is not None:
        words += ["-A", changes.account]
    return [*words, job_id] if len(words) > 1 else None


def move_argv(job_id: str, changes: JobChanges) -> list[str] | None:
    """qmove to the new queue; None when the queue does not change."""
    if changes.queue_name is None:
        return None
    return ["qmove", changes.queue_name, job_id]


def commands(job_id: str, changes: JobChanges) -> list[list[str]]:
    """Every command the update needs, in the order they run."""
    return [words for words in (argv(job_id, changes), move_argv(job_id, changes)) if words]


def parse(result: CommandResult) -> None:
    outage.check(result, "update")
    if not result.ok:
        raise UpdateError(result.argv, result.exit_code, result.stdout, result.stderr)
