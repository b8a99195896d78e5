"""Slurm job arrays as the live queue shows them: one status per array, its elements in it.

squeue's `%i` names an element `123_7` (array 123, index 7) and the elements still waiting
together, `123_[8-999%50]` (the `%50` is the throttle); every line carries the array's
comment (the gateway's tag). The bracket is printed in full only with `SLURM_BITSTR_LEN=0`
(squeue's default cuts it at 64 characters), which `squeue.argv` sets. A finished element
stays in the queue for MinJobAge with its state (`COMPLETED`, `FAILED`, `CANCELLED`...).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices, ArrayIndicesError

_ELEMENT = re.compile(r"^(\d+)_(\d+)$")
_WAITING = re.compile(r"^(\d+)_\[([0-9,:\-]+)(?:%\d+)?\]$")


def array_id(job_id: str) -> str | None:
    """The array a `%i` names (`123` for `123_7` or `123_[8-9]`); None for another job."""
    found = _ELEMENT.match(job_id) or _WAITING.match(job_id)
    return found[1] if found else None


def elements_of(job_id: str) -> list[int] | ArrayIndices | None:
    """The element (`[7]`) or the waiting elements a `%i` names; None when it names none
    this gateway can read (then the line is left out, never guessed)."""
    element = _ELEMENT.match(job_id)
    if element:
        return [int(element[2])]
    waiting = _WAITING.match(job_id)
    if waiting:
        try:
            return ArrayIndices.parse(waiting[2])
        except ArrayIndicesError:
            return None
    return None


def status(array: str, lines: Iterable[tuple[str, NativeStatus]]) -> NativeStatus:
    """The status of array `array` from its queue lines (`%i` and what the line said): its
    elements as the queue shows them, and the state they make (`ArrayElements.state`)."""
    seen: list[tuple[int, ElementState]] = []
    for job_id, line in lines:
        indices = elements_of(job_id)
        if indices is None or line.state is None:
            continue
        element = ElementState(line.state, line.native_state, line.exit_code)
        seen.extend((index, element) for index in indices)
    elements = ArrayElements.of(seen)
    state = elements.state() if len(elements) else JobState.QUEUED
    return NativeStatus(array, state, "ARRAY", elements=elements)
