"""The execution side of a scheduler plug-in: submit, status, cancel, find, update, requeue.

A batch system is bound to one transport (the machine and account its commands run as). Its
`statuses` answers for any number of jobs with one query of the live queue, consulting the
scheduler's history only for jobs that query no longer shows or shows as finished.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Protocol

from iri_gateway.models.job import JobNodes, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices


@dataclass(frozen=True)
class JobChanges:
    """The IRI update operation: what may change on a job that has not started."""

    duration: int | None = None
    queue_name: str | None = None
    name: str | None = None
    account: str | None = None

    def empty(self) -> bool:
        return all(v is None for v in (self.duration, self.queue_name, self.name, self.account))


class BatchSystem(Protocol):
    """Commands of one scheduler, through one transport."""

    def submit(self, script: str, *, tag: str) -> str:
        """Submit the script, tagged with the gateway's job id; return the native id."""

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        """Current status of each job; ids the scheduler no longer knows are left out."""

    def cancel(self, native_id: str) -> None:
        """Ask the scheduler to cancel the job (a job already finished is not an error)."""

    def cancel_elements(self, native_id: str, indices: ArrayIndices) -> None:
        """Cancel these elements of an array (the others run on); elements already finished
        are not an error."""

    def find(self, tag: str) -> str | None:
        """The native id of the job submitted with `tag`, if the scheduler has it."""

    def update(self, native_id: str, changes: JobChanges) -> None:
        """Change a queued job."""

    def requeue(self, native_id: str) -> str:
        """Run the job again under the same native id, every member of a cluster job with it
        (a running job is stopped first); returns the command, in the scheduler's words."""

    def nodes(self, native_id: str) -> JobNodes | None:
        """Where the running job is: its batch host and each node's address, as the scheduler
        says (the port proxy connects there); None while no part of it runs."""

    def ping(self, timeout: float) -> str:
        """Ask the scheduler, as cheaply as it can be asked, whether it answers (the resource
        health probe, `service.resource_health`); return its words. PingError (in its words)
        when it says it is down, TransportError when the command cannot be run; `timeout`
        bounds the command itself."""
