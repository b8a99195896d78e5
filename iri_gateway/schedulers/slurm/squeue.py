"""`squeue`: the live queue, one call for every job of the account, parsed defensively.

No `-j` list: squeue fails outright when one listed id has been purged, so the whole queue
of the account (`--me`) is read and filtered here. Fields end with '|' (`--Format`'s
suffix: no padding, nothing cut, as squeue 22.05 printed a 48-character comment); the
reason may hold commas and colons (`ReqNodeNotAvail, UnavailableNodes:nid[001-002]`).
`exit_code` is the raw wait status of a job that ended (`256` for exit code 1, `15` for
SIGTERM), `0` before; it is read for array elements only (other jobs' come from the
history); a line without it (as `--format=%i|%T|%k|%r` printed, and the recorded outputs of
the tests) reads as no exit code. A heterogeneous job shows one line per
component (`93+0`, `93+1`); they are folded into one status under the leader's id `93`, the
id sbatch printed (see `hetjob`). An array's lines (`123_7`, `123_[8-99%5]`) are folded
into one status under the array's id `123`, its elements in it (see `arrays`).
"""

from __future__ import annotations

from typing import NamedTuple

from iri_gateway.errors import StatusError
from iri_gateway.models.job import NativeStatus
from iri_gateway.schedulers.slurm import arrays, hetjob, outage
from iri_gateway.schedulers.slurm.states import map_state
from iri_gateway.transport.base import CommandResult

FORMAT = "JobArrayID:|,State:|,Comment:|,Reason:|,exit_code:|"
"""`JobArrayID` is `%i`: `93`, a het job's `93+0`, an array's `123_7` and `123_[8-99%5]`."""


class Queue(NamedTuple):
    """What squeue said: statuses and job ids by tag, and het jobs' component statuses."""

    statuses: dict[str, NativeStatus]
    tags: dict[str, str]
    components: dict[str, list[NativeStatus]]


def argv() -> list[str]:
    return ["squeue", "--me", "--noheader", "--states=all", f"--Format={FORMAT}"]


def parse(result: CommandResult) -> Queue:
    """Statuses by job id (a het job by its leader's id), and job ids by comment (tag)."""
    outage.check(result, "status query")
    if not result.ok:
        raise StatusError(result.argv, result.exit_code, result.stdout, result.stderr)
    statuses: dict[str, NativeStatus] = {}
    tags: dict[str, str] = {}
    array_lines: dict[str, list[tuple[str, NativeStatus]]] = {}
    for line in result.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 4 or not parts[0].strip():
            continue
        job_id, native, comment, reason = (part.strip() for part in parts[:4])
        state = map_state(native, reason)
        array = arrays.array_id(job_id)
        # An array element's exit code is read here (the history cannot name elements); any
        # other job's comes from the history, as before (`SlurmBatch.statuses`).
        final = array is not None and state is not None and state.final
        code = _exit_code(parts[4]) if final and len(parts) > 4 else None
        status = NativeStatus(job_id, state, native, code, reason)
        if array is not None:
            array_lines.setdefault(array, []).append((job_id, status))
            if comment and comment != "(null)":
                tags[comment] = array
            continue
        statuses[job_id] = status
        if comment and comment != "(null)":
            component = hetjob.split(job_id)
            tags[comment] = component[0] if component else job_id
    components = hetjob.group(statuses.values())
    for leader, members in components.items():
        for member in members:
            del statuses[member.native_id]
        statuses[leader] = hetjob.aggregate(leader, members)
    for array, lines in array_lines.items():
        statuses[array] = arrays.status(array, lines, queue=True)
    return Queue(statuses, tags, components)


def _exit_code(raw: str) -> int | None:
    """squeue's raw wait status as the gateway's exit code: the program's own code, or
    256 + the signal that killed it (as `sacct.exit_code` reads `0:15`)."""
    try:
        status = int(raw.strip())
    except ValueError:
        return None
    signal, code = status & 0x7F, (status >> 8) & 0xFF
    return 256 + signal if signal else code
