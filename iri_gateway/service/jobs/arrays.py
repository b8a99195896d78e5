"""The elements of array jobs: a page of them with their states, and cancels of chosen ones.

The elements are the store's (`JobRecord.elements`, kept current by `tracking`): a page is
cut from their runs, never by asking the scheduler. A cancel of elements is sent by a
submitter worker like any scheduler command; unlike a whole job's cancel it is not stored as
an intent, so one that cannot be delivered now (an outage) is reported, for the caller to
send again (a cancel of the whole array is always recorded: `changes`).
"""

from __future__ import annotations

from dataclasses import dataclass

from iri_gateway.models.array_elements import ArrayElements, ElementState
from iri_gateway.models.job import JobState
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.service.jobs.context import JobsContext
from iri_gateway.service.jobs.errors import JobNotChangeableError, NotArrayElementsError
from iri_gateway.service.jobs.tracking import known_elements
from iri_gateway.service.operations.store import JobRecord


@dataclass(frozen=True)
class ElementPage:
    """Some elements of an array job, in ascending order of index, and how many match."""

    total: int
    elements: list[tuple[int, ElementState]]


class Arrays:
    """Pages and cancels of the elements of array jobs, on every resource."""

    def __init__(self, context: JobsContext) -> None:
        self.context = context

    def elements(
        self,
        *,
        owner: str,
        job_id: str,
        offset: int,
        limit: int,
        state: JobState | None = None,
    ) -> ElementPage:
        """Elements `offset`.. of `owner`'s array job (those in `state`, when given)."""
        known = known_elements(self._array(owner, job_id))
        if state is not None:
            known = ArrayElements(run for run in known.runs if run.status.state == state)
        return ElementPage(len(known), known.page(offset, limit))

    def cancel_elements(
        self, *, owner: str, job_id: str, indices: ArrayIndices, wait: float | None = None
    ) -> JobRecord:
        """Cancel these elements of `owner`'s array job (the others run on); waits `wait`
        seconds (None: until the scheduler answered). Indices that are not the array's are
        refused (NotArrayElementsError, naming them); elements already ended are not an error."""
        context = self.context
        record = self._array(owner, job_id)
        array = ArrayIndices.parse(record.effective_spec["array"]["indices"])
        outside = [index for index in _first(indices, len(array) + 5) if index not in array][:5]
        if outside:
            raise NotArrayElementsError(
                f"indices: not elements of this array: {', '.join(map(str, outside))} "
                f"(its indices are {array.text()})"
            )
        if record.state.final:
            return record
        native_id = record.native_id
        if native_id is None:
            raise JobNotChangeableError(
                f"array job {job_id} is not with the scheduler yet: its elements cannot be "
                "canceled one by one until it is (cancel the whole array, or wait)"
            )
        backend = context.backends.for_job(context.registry.get(record.resource_id), record)

        def send() -> JobRecord:
            backend.batch.cancel_elements(native_id, indices)
            return context.current(record.id)

        return context.awaited(context.submitter.run(record.resource_id, send), record.id, wait)

    def _array(self, owner: str, job_id: str) -> JobRecord:
        record = self.context.owned(owner, job_id)
        if not isinstance(record.effective_spec.get("array"), dict):
            raise JobNotChangeableError(f"job {job_id} is not an array: it has no elements")
        return record


def _first(indices: ArrayIndices, count: int) -> list[int]:
    """At most `count` of `indices` (more than the array has cannot all be its own)."""
    return [indices.nth(position) for position in range(min(count, len(indices)))]
