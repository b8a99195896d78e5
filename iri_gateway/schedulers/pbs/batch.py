"""PBS Pro / OpenPBS through a transport: qsub, qstat (with -x for history), qdel, qalter/qmove,
qrerun."""

from __future__ import annotations

import logging
from collections.abc import Collection

from iri_gateway.errors import CancelError
from iri_gateway.models.job import JobNodes, NativeStatus
from iri_gateway.models.job_arrays import ArrayIndices
from iri_gateway.schedulers.batch import JobChanges
from iri_gateway.schedulers.pbs import (
    exec_host,
    never_runs,
    qalter,
    qdel,
    qrerun,
    qstat,
    qstat_arrays,
    qstat_server,
    qsub,
)
from iri_gateway.transport.base import Transport

log = logging.getLogger(__name__)


class PbsBatch:
    """PBS's commands for one account."""

    def __init__(self, transport: Transport) -> None:
        self.transport = transport

    def submit(self, script: str, *, tag: str) -> str:
        return qsub.parse(self.transport.run(qsub.argv(tag), stdin=script, timeout=120))

    def ping(self, timeout: float) -> str:
        return qstat_server.parse(
            self.transport.run(qstat_server.argv(), timeout=timeout, idempotent=True)
        )

    def statuses(self, native_ids: Collection[str]) -> dict[str, NativeStatus]:
        """One qstat call for all jobs; `-x` includes the finished ones, so none is needed after,
        and `-t` the subjobs of the arrays among them (an array's status carries its
        elements: `qstat_arrays`)."""
        wanted = set(native_ids)
        if not wanted:
            return {}
        arrays = {native_id for native_id in wanted if qstat_arrays.is_array(native_id)}
        argv = qstat.argv(wanted, subjobs=bool(arrays))
        jobs = qstat.parse(self.transport.run(argv, idempotent=True))
        found = qstat.statuses(jobs, wanted - arrays)
        found.update(qstat_arrays.statuses(jobs, arrays))
        for native_id, status in found.items():
            if never_runs.said_of(status):
                found[native_id] = self._never_runs(native_id, status)
        return found

    def _never_runs(self, native_id: str, status: NativeStatus) -> NativeStatus:
        """A job PBS says can never run, deleted and reported failed (`never_runs`). Until
        the deletion succeeds it is reported as PBS shows it, so a later cycle tries again
        (an outage while deleting stays an outage: SchedulerUnavailableError)."""
        if never_runs.still_queued(status):
            try:
                self.cancel(native_id)
            except CancelError as error:
                log.warning("job %s can never run, and qdel refused: %s", native_id, error)
                return status
        return never_runs.as_failed(status)

    def nodes(self, native_id: str) -> JobNodes | None:
        jobs = qstat.parse(self.transport.run(qstat.argv([native_id]), idempotent=True))
        return exec_host.nodes(jobs, native_id)

    def cancel(self, native_id: str) -> None:
        if qstat_arrays.is_array(native_id):
            self._cancel_array(native_id, None)
        else:
            qdel.parse(self.transport.run(qdel.argv(native_id)))

    def cancel_elements(self, native_id: str, indices: ArrayIndices) -> None:
        self._cancel_array(native_id, indices)

    def _cancel_array(self, native_id: str, chosen: ArrayIndices | None) -> None:
        """Delete the subjobs `chosen` (None: all) of an array that have not ended, read first
        with one qstat: a qdel naming ended subjobs (the array's, or a range's) would throw
        their records away, exit codes with them, and one qdel per run of them, as the qdel
        client drops ids of one array past the second (`qdel`). An array the server does
        not know is left to qdel to say so in its own words."""
        argv = qstat.argv([native_id], subjobs=True)
        jobs = qstat.parse(self.transport.run(argv, idempotent=True))
        found = qstat.matched(jobs, [native_id])
        array = qstat_arrays.view(jobs, found[0][1]) if found else None
        if array is None:  # one of the ids asked for, for qdel's words
            said = native_id if chosen is None else qstat_arrays.subjob_id(native_id, chosen.first)
            qdel.parse(self.transport.run(qdel.argv(said)))
            return
        for command in qdel.array_commands(native_id, array, chosen):
            qdel.parse(self.transport.run(command))

    def find(self, tag: str) -> str | None:
        jobs = qstat.parse(self.transport.run(qstat.argv(), idempotent=True))
        return qstat.find_tag(jobs, tag)

    def update(self, native_id: str, changes: JobChanges) -> None:
        for command in qalter.commands(native_id, changes):
            qalter.parse(self.transport.run(command))

    def requeue(self, native_id: str) -> str:
        qrerun.parse(self.transport.run(qrerun.argv(native_id)))
        return " ".join(qrerun.argv(native_id))
