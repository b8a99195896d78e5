"""Slurm job states (long names, as squeue %T and sacct State print them) -> IRI states."""

from __future__ import annotations

from iri_gateway.models.job import JobState

_STATES: dict[str, JobState] = {
    "PENDING": JobState.QUEUED,
    "CONFIGURING": JobState.QUEUED,
    "REQUEUED": JobState.QUEUED,
    "REQUEUE_FED": JobState.QUEUED,
    "REQUEUE_HOLD": JobState.HELD,
    "RESV_DEL_HOLD": JobState.HELD,
    "SUSPENDED": JobState.HELD,
    "STOPPED": JobState.HELD,
    "RUNNING": JobState.ACTIVE,
    "COMPLETING": JobState.ACTIVE,
    "STAGE_OUT": JobState.ACTIVE,
    "RESIZING": JobState.ACTIVE,
    "SIGNALING": JobState.ACTIVE,
    "COMPLETED": JobState.COMPLETED,
    "FAILED": JobState.FAILED,
    "TIMEOUT": JobState.FAILED,
    "OUT_OF_MEMORY": JobState.FAILED,
    "NODE_FAIL": JobState.FAILED,
    "BOOT_FAIL": JobState.FAILED,
    "DEADLINE": JobState.FAILED,
    "PREEMPTED": JobState.FAILED,
    "SPECIAL_EXIT": JobState.FAILED,
    "CANCELLED": JobState.CANCELED,
    "REVOKED": JobState.CANCELED,
}
_HELD_REASONS = ("JobHeldUser", "JobHeldAdmin")


def map_state(native: str, reason: str | None = None) -> JobState | None:
    """The IRI state for a Slurm state; None for a state this gateway does not know.

    Accepts `CANCELLED by 1000` (sacct) and `CANCELLED+` forms; a pending job held by a user
    or admin is `held`.
    """
    word = native.split()[0].rstrip("+") if native.strip() else ""
    state = _STATES.get(word)
    if state is JobState.QUEUED and reason in _HELD_REASONS:
        return JobState.HELD
    return state
