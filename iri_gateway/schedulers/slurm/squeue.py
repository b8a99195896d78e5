"""`squeue`: the live queue, one call for every job of the account, parsed defensively.

No `-j` list: squeue fails outright when one listed id has been purged, so the whole queue
of the account (`--me`) is read and filtered here. Fields are separated by '|'; the reason
comes last and is taken whole, since it may hold commas and colons
(`ReqNodeNotAvail, UnavailableNodes:nid[001-002]`).
"""

from __future__ import annotations

from iri_gateway.errors import StatusError
from iri_gateway.models.job import NativeStatus
from iri_gateway.schedulers.slurm.states import map_state
from iri_gateway.transport.base import CommandResult

FORMAT = "%i|%T|%k|%r"


def argv() -> list[str]:
    return ["squeue", "--me", "--noheader", "--states=all", f"--format={FORMAT}"]


def parse(result: CommandResult) -> tuple[dict[str, NativeStatus], dict[str, str]]:
    """Statuses by job id, and job ids by comment (the gateway's tag)."""
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
            tags[comment] = job_id
    return statuses, tags
