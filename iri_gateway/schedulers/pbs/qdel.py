"""`qdel`: deleting a job, or subjobs of an array, that has already ended is not an error.

For a job in the server's history qdel prints `qdel: Job has finished <id>` and exits 35
(PBSE_HISTJOBID, 15139, modulo 256); for an ended subjob named alone,
`qdel: Request invalid for finished array subjob <id>` and 55 (PBSE_NOHISTARRAYSUBJOB, 15159).
Other refusals stay errors with qdel's words: an unknown id (`qdel: Unknown Job Id <id>`, 153:
the id is wrong, or its history has already been purged), a job that is exiting
(`qdel: Request invalid for state of job <id>`, 168) and a subjob the array does not have
(`qdel: Invalid request 4135[99].pbshost`, 156).

Subjobs are named `123[5].server`, or as a range `123[0-9].server` or `123[0-8:2].server`
(a step is taken: `qdel 4135[2-6:2].pbshost` deleted 2, 4 and 6); a comma is refused
(`qdel: illegally formed job identifier: 4144[0,3].pbshost`, exit 1). What the real OpenPBS
23.06.06 does that its manual does not say (tests/data/pbs/real-array-commands.txt):

- given several ids of one array, the qdel CLIENT merges them into one before sending and
  keeps only the first two: `qdel 4145[2].pbshost 4145[4].pbshost 4145[6].pbshost` exits 0
  while the server receives `4145[2,4].pbshost`, and [6] runs on (src/lib/Libutil/
  dedup_jobids.c). So every id of an array is sent by a qdel of its own (`array_commands`);
- a range, and the whole array `123[].server`, also THROW AWAY the records of their subjobs
  that had already ended, exit codes with them (`qstat_arrays`). So a cancel names only
  subjobs that have not ended, in runs of them, read just before (`array_commands`); a
  subjob that ends between that read and the qdel can still lose its record.
"""

from __future__ import annotations

from iri_gateway.errors import CancelError
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.pbs import outage
from iri_gateway.schedulers.pbs.qstat_arrays import ArrayView, subjob_id
from iri_gateway.transport.base import CommandResult

HISTORY_JOB_EXIT = 35  # PBSE_HISTJOBID & 0xff
ENDED_SUBJOB_EXIT = 55  # PBSE_NOHISTARRAYSUBJOB & 0xff
_ENDED_EXITS = frozenset({HISTORY_JOB_EXIT, ENDED_SUBJOB_EXIT})
_ENDED_WORDS = ("Job has finished", "Request invalid for finished array subjob")


def argv(job_id: str) -> list[str]:
    return ["qdel", job_id]


def array_commands(job_id: str, array: ArrayView, chosen: ArrayIndices | None) -> list[list[str]]:
    """The qdels that cancel the subjobs `chosen` (None: every one) of array `job_id` that have
    not ended or begun to exit, as `array` shows them: one qdel per run of them (see the
    module). None left to cancel: no command."""
    queued = [index for first, last, step in array.queued for index in range(first, last + 1, step)]
    wanted = [index for index in array.started() + queued if chosen is None or index in chosen]
    if not wanted:
        return []
    return [["qdel", word] for word in _run_ids(job_id, ArrayIndices.of(wanted))]


def _run_ids(job_id: str, indices: ArrayIndices) -> list[str]:
    """One id per run: `123[5].server`, `123[0-9].server`, `123[0-8:2].server`."""
    words = []
    for first, last, step in indices.runs:
        if first == last:
            words.append(subjob_id(job_id, first))
        else:
            span = f"{first}-{last}" if step == 1 else f"{first}-{last}:{step}"
            words.append(subjob_id(job_id, span))
    return words


def parse(result: CommandResult) -> None:
    """Nothing when qdel did it, or when every complaint is of a job or subjob that already
    ended; CancelError with qdel's words otherwise."""
    outage.check(result, "cancel")
    if result.ok:
        return
    complaints = [line for line in result.stderr.splitlines() if line.strip()]
    ended = [line for line in complaints if any(words in line for words in _ENDED_WORDS)]
    if len(ended) == len(complaints) and (complaints or result.exit_code in _ENDED_EXITS):
        return
    raise CancelError(result.argv, result.exit_code, result.stdout, result.stderr)
