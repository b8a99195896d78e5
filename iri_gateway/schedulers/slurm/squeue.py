"""`squeue`: the live queue, one call for every job of the account, parsed defensively.

No `-j` list: squeue fails outright when one listed id has been purged, so the whole queue
of the account (`--me`) is read and filtered here. Fields are separated by '|'; the reason
comes last and is taken whole, since it may hold commas and colons
(`ReqNodeNotAvail, UnavailableNodes:nid[001-002]`). A heterogeneous job shows one line per
component (`93+0`, `93+1`); they are folded into one status under the leader's id `93`, the
id sbatch printed (see `hetjob`).
"""

from __future__ import annotations

from typing import NamedTuple

from iri_gateway.errors import StatusError
from iri_gateway.models.job import NativeStatus
from iri_gateway.schedulers.slurm import hetjob, outage
from iri_gateway.schedulers.slurm.states import map_state
from iri_gateway.transport.base import CommandResult

FORMAT = "%i|%T|%k|%r"


class Queue(NamedTuple):
    """What squeue said: statuses and job ids by tag, and het jobs' component statuses."""

    statuses: dict[str, NativeStatus]
    tags: dict[str, str]
    components: dict[str, list[NativeStatus]]


def argv() -> list[str]:
    return ["squeue", "--me", "--noheader", "--states=all", f"--format={FORMAT}"]


def parse(result: CommandResult) -> Queue:
    """Statuses by job id (a het job by its leader's id), and job ids by comment (tag)."""
    outage.check(result, "status query")
    if not result.ok:
        raise StatusError(result.argv, result.exit_code, result.stdout, result.stderr)
    statuses: dict[str, NativeStatus] = {}
    tags: dict[str, str] = {}
    for line in result.stdout.splitlines():
        parts = line.split("|", 3)
        if len(parts) != 4 or not parts[0].strip():
            continue
        job_id, native, comment, reason = (part.strip() for part in parts)
        statuses[job_id] = NativeStatus(job_id, map_state(native, reason), native, None, reason)
        if comment and comment != "(null)":
            component = hetjob.split(job_id)
            tags[comment] = component[0] if component else job_id
    components = hetjob.group(statuses.values())
    for leader, members in components.items():
        for member in members:
            del statuses[member.native_id]
        statuses[leader] = hetjob.aggregate(leader, members)
    return Queue(statuses, tags, components)
