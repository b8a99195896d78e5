"""A PBS job that can never run: told to the user as a failure, not left queued forever.

PBS accepts any request at `qsub` time and lets the scheduler judge it. When the request is
more than the whole complex could ever give (more CPUs in a chunk than any vnode has, more
in total than all of them), the scheduler leaves the job queued with the comment
`Can Never Run: <reason>` on every cycle, for as long as nobody deletes it (seen on the
real OpenPBS 23.06.06: `Can Never Run: Insufficient amount of resource: ncpus (R: 99 A: 8
T: 8)`). Slurm refuses such a job at submission, so a gateway user would otherwise wait
for a job that PBS itself says will not start.

The gateway therefore deletes such a job (qdel) and reports it `failed` with PBS's words;
once deleted, the job's history keeps the comment (`... and terminated`), so the verdict is
read the same way after a restart of the gateway. A request PBS calls merely "Not Running"
(busy vnodes, or a placement it cannot make right now) is left queued: only PBS's own
"never" ends a job.
"""

from __future__ import annotations

from dataclasses import replace

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState, NativeStatus

VERDICT = "Can Never Run"
"""How the PBS scheduler's comment starts for a job it will never start."""

DELETED = "the gateway deleted the job: PBS would keep it queued though it can never run"


def said_of(status: NativeStatus) -> bool:
    """PBS's comment on this job says it can never run."""
    return status.reason is not None and VERDICT in status.reason


def still_queued(status: NativeStatus) -> bool:
    """The job is still in PBS's queue (it must be deleted before it is reported failed)."""
    return status.state is not None and not status.state.final


def as_failed(status: NativeStatus) -> NativeStatus:
    """The status as the gateway reports it: failed, PBS's words kept, the deletion said. An
    array's elements (PBS says it of the array: none of them can run) that did not complete
    or fail are failed too, as the array's state is theirs."""
    reason = status.reason or VERDICT
    if DELETED not in reason:
        reason = f"{reason}; {DELETED}"
    elements = status.elements
    if elements is not None:
        elements = ArrayElements(
            run if run.status.state in _OUTCOMES else replace(run, status=_failed(run.status))
            for run in elements.runs
        )
    return replace(status, state=JobState.FAILED, reason=reason, elements=elements)


_OUTCOMES = frozenset({JobState.COMPLETED, JobState.FAILED})


def _failed(element: ElementState) -> ElementState:
    return replace(element, state=JobState.FAILED)
