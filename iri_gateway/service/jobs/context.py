"""What every part of the engine shares: its collaborators, what it is sending, the wait.

The engine's parts (`submission`, `changes`, `recovery`, `tracking`, `reading`, `files`)
each do one job; they meet here, on the same store, scheduler backends and submitter, and on
the same record of what this engine is sending now (`inflight`), so that a cancel, a
submission and the reconcile never act on one job at the same time.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass, field, replace

from iri_gateway.errors import SchedulerError
from iri_gateway.models.job import JobState
from iri_gateway.profiles.loading import ProfileRegistry
from iri_gateway.service.jobs.errors import JobNotFoundError
from iri_gateway.service.jobs.inflight import InFlight
from iri_gateway.service.jobs.job_templates import TemplateBook
from iri_gateway.service.jobs.submitter import Submitter
from iri_gateway.service.operations.backends import Backends
from iri_gateway.service.operations.metrics import Metrics
from iri_gateway.service.operations.replicas import Replica
from iri_gateway.service.operations.store import JobRecord, JobStore

log = logging.getLogger(__name__)


@dataclass
class JobsContext:
    """The collaborators of the engine's parts, and what this engine is sending now."""

    registry: ProfileRegistry
    store: JobStore
    backends: Backends
    replica: Replica
    """This process among the gateway replicas sharing the store (see `replicas`)."""
    submitter: Submitter
    """Runs the scheduler commands of submissions, cancels and updates off the caller's
    thread, a bounded number at a time per resource (see `submitter`)."""
    templates: TemplateBook
    """The job templates: each user's own and the facility's (see `job_templates`)."""
    clock: Callable[[], float] = time.time
    settle_time: float = 30.0
    """Seconds after a submission attempt before the continuous reconcile may decide that
    the scheduler never saw it (see `recovery`)."""
    resubmit_wait: float = 2.0
    """Seconds the reconcile waits for a resubmission it handed to the submitter before
    going on (the submitter goes on in any case)."""
    in_flight: InFlight = field(default_factory=InFlight)
    metrics: Metrics = field(default_factory=Metrics)
    """Where launches and retries are counted (see `operations.metrics`)."""

    def current(self, job_id: str) -> JobRecord:
        """The job as the store has it now, whoever owns it; JobNotFoundError when gone."""
        record = self.store.get(job_id)
        if record is None:
            raise JobNotFoundError(f"no job {job_id!r}")
        return record

    def owned(self, owner: str, job_id: str) -> JobRecord:
        """The job `job_id` of `owner`; JobNotFoundError for anyone else's or no job."""
        record = self.store.get(job_id)
        if record is None or record.owner != owner:
            raise JobNotFoundError(f"no job {job_id!r}")
        return record

    def unsettled_submission(self, record: JobRecord, settle: float) -> bool:
        """Being sent by this engine or another live replica, or attempted less than
        `settle` seconds ago."""
        if self.in_flight.sending(record.id):
            return True
        if record.claimed_by not in (None, self.replica.id) and (
            record.claimed_by in self.replica.live()
        ):
            return True
        attempted = record.submit_attempted_at
        return bool(settle) and attempted is not None and self.clock() - attempted < settle

    def awaited(self, future: Future[JobRecord], job_id: str, wait: float | None) -> JobRecord:
        """The outcome of `future` within `wait` seconds; else the job with what is being
        done in its message. The scheduler's refusal is raised.

        Any other fault of the attempt (the database busy past its time-out, a bug) does
        not undo the job: it is recorded and accepted, the attempt gave up its claim, and
        the reconcile sends it. The answer says so instead of a 500 that would make the
        client send a second job."""
        try:
            return future.result(timeout=wait)
        except FutureTimeout:
            pass
        except SchedulerError:
            raise
        except Exception as fault:
            log.error(
                "the first attempt to send job %s failed; the reconcile sends it",
                job_id,
                exc_info=fault,
            )
            record = self.current(job_id)
            said = " ".join(str(fault).split())[:300]
            return replace(
                record,
                message=f"{record.message}; the first attempt to send it "
                f"failed ({type(fault).__name__}: {said}), the reconcile sends it",
            )
        record = self.current(job_id)
        if record.state == JobState.NEW and len(record.history) == 1:  # nothing said yet
            doing = (
                "being sent to the scheduler"
                if future.running()
                else f"waiting for one of the {self.submitter.concurrency} submission "
                f"slots of {record.resource_id}"
            )
            return replace(record, message=f"{record.message}; {doing}")
        return record


def job_directory(record: JobRecord) -> str:
    """The folder the job runs in; the engine records one for every job it accepts."""
    directory = record.paths.directory
    if directory is None:
        raise ValueError(f"job {record.id} has no directory in its effective spec")
    return directory
