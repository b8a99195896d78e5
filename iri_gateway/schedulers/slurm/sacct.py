"""`sacct`: history of jobs that left the queue or finished, with their exit codes.

Without slurmdbd, `sacct -c` reads the job completion log (jobcomp/filetxt); with
accounting storage, plain `sacct` works. The profile says which (`history: accounting` or
`jobcomp`). `State` may read `CANCELLED by 1000`; `ExitCode` is `code:signal`.

An array: with accounting storage `sacct -X` names its elements `123_7` (and those never
started `123_[8-9]`), folded here into one status for `123`; `sacct -c` (jobcomp) knows no
array fields ("sacct: error: Unknown type ArrayJobId: 4615" on stderr, exit 0) and prints
only the record kept under the array's own id (the last element to start, as `4615`), so
the live queue is where an array's elements are read (`squeue`).

A heterogeneous job: `sacct -X` names its components `93+0`, `93+1`, folded here into one
status for `93`; `sacct -c` (jobcomp) prints the leader component's record as `93` and
complains about the het fields on stderr while exiting 0 (see `hetjob`).
"""

from __future__ import annotations

from collections.abc import Collection

from iri_gateway.errors import StatusError
from iri_gateway.models.job import NativeStatus
from iri_gateway.schedulers.slurm import arrays, hetjob
from iri_gateway.schedulers.slurm.states import map_state
from iri_gateway.transport.base import CommandResult


def argv(job_ids: Collection[str], jobcomp: bool) -> list[str]:
    command = ["sacct", "-c"] if jobcomp else ["sacct", "-X"]
    return [
        *command,
        "--noheader",
        "--parsable2",
        f"--jobs={','.join(sorted(job_ids))}",
        "--format=JobID,State,ExitCode",
    ]


def exit_code(text: str) -> int | None:
    """`3:0` -> 3; `0:15` (killed by signal 15) -> 256 + 15, as the PBS convention does."""
    code, _, signal = text.partition(":")
    try:
        value, sig = int(code), int(signal or 0)
    except ValueError:
        return None
    return value if sig == 0 or value != 0 else 256 + sig


def parse(result: CommandResult) -> dict[str, NativeStatus]:
    """The last record per job id (a requeued job has several); het components folded."""
    if not result.ok:
        raise StatusError(result.argv, result.exit_code, result.stdout, result.stderr)
    statuses: dict[str, NativeStatus] = {}
    array_lines: dict[str, list[tuple[str, NativeStatus]]] = {}
    for line in result.stdout.splitlines():
        parts = line.split("|")
        if len(parts) < 3 or not parts[0].strip() or "." in parts[0]:
            continue
        job_id, native, code = parts[0].strip(), parts[1].strip(), parts[2].strip()
        status = NativeStatus(job_id, map_state(native), native, exit_code(code))
        array = arrays.array_id(job_id)
        if array is not None:
            array_lines.setdefault(array, []).append((job_id, status))
            continue
        statuses[job_id] = status
    for leader, components in hetjob.group(statuses.values()).items():
        for component in components:
            del statuses[component.native_id]
        statuses[leader] = hetjob.aggregate(leader, components)
    for array, lines in array_lines.items():
        statuses[array] = arrays.status(array, lines, queue=False)
    return statuses
