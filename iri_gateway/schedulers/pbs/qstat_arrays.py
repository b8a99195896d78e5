"""An array job in a `qstat -f -F json -x -t` document: each element's state and exit code.

What the real OpenPBS 23.06.06 prints (tests/data/pbs/real-array-*.json, captured by
capture-real-arrays.sh; src/server/stat_job.c `status_subjob`):

- the array itself, `123[].pbshost` as qsub printed it: `job_state` Q (H when submitted held)
  until a subjob starts, B (begun) while any is left, F once all ended;
  `array_indices_submitted` (`0-8:2`), `array_indices_remaining` (the subjobs still queued,
  in the server's range grammar `0,8` or `2-5`; `-` for none), `array_state_count`, and
  `max_run_subjobs` when qsub's `-J 0-5%2` throttled it (seen: two of six ran);
- with `-t`, after it, every subjob, `123[4].pbshost`. One that has run is a job of its own:
  its `array_index`, substate, comment and Exit_status, read as a plain job's (`states`;
  X once ended while the array runs, F after). Any other is shown from the ARRAY's record:
  no `array_index`, the array's substate and Exit_status (a summary of the subjobs ended so
  far, not its own), `job_state` Q while queued (even in a held array: its state is the
  array's), and X or F with the comment `Subjob finished` once ended without running, which
  is once deleted (qdel of it, of a range, or of the array), so it is told `canceled`,
  without an exit code.

qdel of a range or of the whole array also THROWS AWAY the records of its subjobs that had
already ended (captured: `real-array-range-purged.json`, `real-array-whole-deleted.json`):
they are then shown as above, `Subjob finished` with the array's Exit_status, and would read
as canceled. So `PbsBatch` never names an ended subjob to qdel (`qdel.array_commands`). A server
without job history keeps no ended subjob's record either; the gateway needs that history
for every PBS job (`qstat -x`).
"""

from __future__ import annotations

import re
from collections.abc import Collection, Mapping
from dataclasses import dataclass

from iri_gateway.models.array_elements import ArrayElements, ElementRun, ElementState
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.schedulers.pbs.qstat import PbsJob, matched
from iri_gateway.schedulers.pbs.states import ENDED, map_state

_SUBJOB = re.compile(r"^(\d+)\[(\d+)\](.*)$")
# The array's own letter that its queued subjobs share (held or waiting as a whole);
# once it has begun (B), the queued ones are plainly queued.
_SHARED_LETTERS = frozenset({"Q", "H", "W", "T", "S", "U"})
_ENDING = ENDED | {"E"}


def is_array(job_id: str) -> bool:
    """`123[].server`: an array job as qsub prints it (its subjobs are `123[4].server`)."""
    return "[]" in job_id


def subjob_id(array_id: str, index: int | str) -> str:
    """The id of element `index` of array `array_id` (`123[].x` -> `123[4].x`), or of a range
    of them (`0-8:2` -> `123[0-8:2].x`)."""
    head, _, tail = array_id.partition("[]")
    return f"{head}[{index}]{tail}"


@dataclass(frozen=True)
class ArrayView:
    """An array of the document: its own record (the parent, in PBS's words) and its
    subjobs, by index."""

    parent: PbsJob
    subjobs: dict[int, PbsJob]

    @property
    def queued(self) -> tuple[tuple[int, int, int], ...]:
        """Runs of the subjobs still queued (`array_indices_remaining`)."""
        return self.parent.array_indices_remaining

    def elements(self) -> ArrayElements:
        """Every element the document tells of: the queued ones as runs, in the array's own
        state while it has not begun (held, for a held array); the others one by one
        (`element`). A subjob in a state this gateway does not know is left out (it keeps
        what was known of it)."""
        letter = self.parent.state if self.parent.state in _SHARED_LETTERS else "Q"
        waiting = ElementState(map_state(letter) or JobState.QUEUED, letter)
        runs = [ElementRun(first, last, step, waiting) for first, last, step in self.queued]
        told = [(index, element(job)) for index, job in self.subjobs.items() if _told(job)]
        return ArrayElements(runs).updated(
            (index, state) for index, state in told if state is not None
        )

    def started(self) -> list[int]:
        """Subjobs that left the queue, have not ended and are not exiting (PBS refuses to
        delete those, and they end by themselves)."""
        return sorted(
            index
            for index, job in self.subjobs.items()
            if job.state not in _ENDING and job.array_index is not None
        )


def view(jobs: Mapping[str, PbsJob], array_id: str) -> ArrayView | None:
    """The array `array_id` as reported (the id qstat printed), with its listed subjobs; None
    when the document does not have it."""
    parent = jobs.get(array_id)
    if parent is None:
        return None
    head, _, tail = array_id.partition("[]")
    subjobs: dict[int, PbsJob] = {}
    for job_id, job in jobs.items():
        found = _SUBJOB.match(job_id)
        if found and found[1] == head and found[3] == tail:
            subjobs[int(found[2])] = job
    return ArrayView(parent, subjobs)


def _told(job: PbsJob) -> bool:
    """A subjob that says more than `array_indices_remaining`: one that ran, or ended."""
    return job.array_index is not None or job.state in ENDED


def element(job: PbsJob) -> ElementState | None:
    """One subjob as an element (see the module: one without its own record that has ended
    was deleted before it started). None for a state the gateway does not know."""
    if job.array_index is None and job.state in ENDED:
        return ElementState(JobState.CANCELED, job.state)
    status = job.status()
    if status.state is None:
        return None
    return ElementState(status.state, job.state, status.exit_code)


def status(array: ArrayView, native_id: str) -> NativeStatus:
    """The array as the gateway tracks it: its elements, the state they make
    (`ArrayElements.state`), the array's own letter, and its comment (where PBS says, for
    instance, that it can never run)."""
    elements = array.elements()
    return NativeStatus(
        native_id,
        elements.state(),
        array.parent.state,
        reason=array.parent.comment,
        elements=elements,
    )


def statuses(jobs: Mapping[str, PbsJob], asked: Collection[str]) -> dict[str, NativeStatus]:
    """The asked arrays that the document has, as NativeStatus with their elements; the
    others are left out (as `qstat.statuses` does)."""
    found: dict[str, NativeStatus] = {}
    for native_id, reported in matched(jobs, asked):
        array = view(jobs, reported)
        if array is not None:
            found[native_id] = status(array, native_id)
    return found
