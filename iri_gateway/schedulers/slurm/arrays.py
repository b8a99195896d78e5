"""Slurm job arrays as the live queue shows them: one status per array, its elements in it.

squeue's `%i` names an element `123_7` (array 123, index 7) and the elements still waiting
together, `123_[8-999%50]` (the `%50` is the throttle); every line carries the array's
comment (the gateway's tag). A finished element stays in the queue for MinJobAge with its
state (`COMPLETED`, `FAILED`, `CANCELLED`...).

squeue cuts a long bracket (past `SLURM_BITSTR_LEN`, 64 characters by default, an
environment variable a command over SSH cannot be given) and ends it with `...`: such a
line names the array but not which elements wait, so it tells nothing of them, and the
elements it would name stay as they were known (waiting, unless seen otherwise).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices, ArrayIndicesError

_ELEMENT = re.compile(r"^(\d+)_(\d+)$")
_WAITING = re.compile(r"^(\d+)_\[([0-9,:\-]+)(?:%\d+)?\]$")
_ANY = re.compile(r"^(\d+)_(?:\d+|\[.*\])$")


def array_id(job_id: str) -> str | None:
    """The array a `%i` names (`123` for `123_7` or `123_[8-9]`); None for another job."""
    found = _ANY.match(job_id)
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


def status(array: str, lines: Iterable[tuple[str, NativeStatus]], *, queue: bool) -> NativeStatus:
    """The status of array `array` from its lines (`%i` and what the line said): its
    elements as they show them, and the state they make (`ArrayElements.state`). From the
    live `queue`, every element Slurm still holds is listed (an element canceled while it
    waited is dropped from the waiting bracket with no line of its own), unless a bracket
    was cut; from the history, only those it names."""
    seen: list[tuple[int, ElementState]] = []
    complete = queue
    for job_id, line in lines:
        indices = elements_of(job_id)
        if indices is None:
            complete = False
            continue
        if line.state is None:  # a state this gateway does not know: nothing said of them
            complete = False
            continue
        element = ElementState(line.state, line.native_state, line.exit_code)
        seen.extend((index, element) for index in indices)
    elements = ArrayElements.of(seen)
    state = elements.state() if len(elements) else JobState.QUEUED
    return NativeStatus(array, state, "ARRAY", elements=elements, elements_complete=complete)
