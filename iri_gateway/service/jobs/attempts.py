"""Sending a recorded job to its scheduler: one attempt after another, off the caller's thread.

An attempt stages the image, makes the job folder and submits the planned script with the
job's tag, and records the outcome whatever it is: queued with its native id; failed with the
scheduler's refusal; still `new` and tried again after a growing pause when nothing reached
the scheduler; or still `new`, unclaimed, for the reconcile (`recovery`) to look up by its
tag when the outcome is unknown — never a second `sbatch` while the first may have worked.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import Future

from iri_gateway.errors import GatewayError, SchedulerError, SchedulerUnavailableError
from iri_gateway.models.job import JobState
from iri_gateway.models.loaded_resource import LoadedResource
from iri_gateway.service.jobs.context import JobsContext, job_directory
from iri_gateway.service.operations import events
from iri_gateway.service.operations.backends import Backend
from iri_gateway.service.operations.events import event, job_fields
from iri_gateway.service.operations.store import JobRecord
from iri_gateway.tracing import scheduler_span
from iri_gateway.transport.base import NotSentError, TransportError

log = logging.getLogger(__name__)

CancelSender = Callable[[JobRecord], JobRecord]
"""Delivers a recorded cancel (`changes.Changes.send_cancel`)."""


class Attempts:
    """The submission attempts of claimed jobs, run by the submitter's workers."""

    def __init__(self, context: JobsContext, *, send_cancel: CancelSender) -> None:
        self.context = context
        self._send_cancel = send_cancel

    def dispatch(self, job_id: str, resource_id: str, *, attempt: int) -> Future[JobRecord]:
        """Hand a claimed job to the submitter for submission attempt `attempt` (0: the
        first, recorded with the job). The claim ends with the job's last attempt."""
        in_flight = self.context.in_flight
        future = self.context.submitter.run(resource_id, lambda: self._attempt(job_id, attempt))
        if attempt == 0:
            in_flight.track_first_attempt(job_id, future)

        def dropped(done: Future[JobRecord]) -> None:
            if done.cancelled():  # the submitter closed first: the next start reconciles it
                in_flight.release(job_id)

        future.add_done_callback(dropped)
        return future

    def _attempt(self, job_id: str, attempt: int) -> JobRecord:
        """One submission attempt, on a submitter worker; the job as it left it.

        Nothing reached the scheduler (it was unavailable, the login node unreachable): the
        job stays `new`, still claimed, and the submitter tries again after a growing pause.
        The outcome is unknown: the claim ends and the reconcile finds the job by its tag
        (never a second `sbatch` while the first may have worked). Otherwise the job is
        queued, canceled (a cancel came first), or failed with the scheduler's refusal
        (raised).
        """
        context = self.context
        retry_in = context.submitter.pause(attempt)
        retry = False
        settled = False
        try:
            record = context.current(job_id)
            if record.state.final or record.native_id is not None:
                return record
            if record.desired == "canceled":
                return context.store.transition(
                    record.id, JobState.CANCELED, "canceled before it reached the scheduler"
                )
            loaded = context.registry.get(record.resource_id)
            backend = context.backends.for_job(loaded, record)
            record, retry = self._send(
                record, loaded, backend, fresh=attempt == 0, retry_in=retry_in
            )
            settled = True
            return record
        except SchedulerError:
            settled = True  # refused: the job failed with the scheduler's words
            raise
        finally:
            if not retry:
                context.in_flight.release(job_id)
                if not settled:  # a fault that is not the scheduler's: the reconcile's job
                    context.store.release(job_id, context.replica.id)
            else:
                resource_id = record.resource_id
                context.metrics.retried(resource_id)

                def again() -> None:
                    self.dispatch(job_id, resource_id, attempt=attempt + 1)

                if not context.submitter.later(retry_in, again):
                    context.in_flight.release(job_id)

    def _send(
        self,
        record: JobRecord,
        loaded: LoadedResource,
        backend: Backend,
        *,
        fresh: bool = True,
        retry_in: float | None = None,
    ) -> tuple[JobRecord, bool]:
        """Stage, create the job folder, submit; the outcome is recorded whatever it is.

        Returns the record and whether to try again. A `fresh` submission had its attempt
        recorded with the record itself; another one records its new attempt first. Besides
        success:

        - the scheduler refused the job (SubmitError, a failed staging command): it failed,
          and the error is raised;
        - nothing reached the scheduler (the transport surely did not send the command, or
          the scheduler was unavailable before it took the request): the job stays `new`,
          its message says why and when it is tried again (`retry_in` seconds), and the
          answer is "try again";
        - the outcome is unknown (sent, but the answer was lost; or the scheduler timed out
          mid-request): the job is accepted and stays `new`, never `failed` — the reconcile
          finds it by its tag, or resubmits it once sure the scheduler never saw it.
        """
        store = self.context.store
        if not fresh:
            record = store.mark_submit_attempt(record.id)
        staging = record.plan_model.pre_submit
        directory = job_directory(record)
        try:
            for command in staging:
                store.transition(record.id, JobState.NEW, f"staging the image: {' '.join(command)}")
                result = backend.transport.run(command, timeout=3600, idempotent=True)
                if not result.ok:
                    raise SchedulerError(
                        result.argv,
                        result.exit_code,
                        result.stdout,
                        result.stderr,
                        hint="image staging",
                    )
            backend.transport.make_directory(directory)
        except TransportError as error:
            return self._not_sent(record, error, retry_in), True
        except SchedulerError as error:
            store.transition(record.id, JobState.FAILED, f"not submitted: {error}")
            _failed(record, error)
            raise
        try:
            with scheduler_span("submit", record.resource_id, loaded.resource.scheduler.kind):
                native_id = backend.batch.submit(record.script, tag=record.tag)
        except SchedulerUnavailableError as error:
            if error.reached:
                return self._outcome_unknown(record, error), False
            return self._not_sent(record, error, retry_in), True
        except SchedulerError as error:
            store.transition(record.id, JobState.FAILED, str(error))
            _failed(record, error)
            raise
        except NotSentError as error:
            return self._not_sent(record, error, retry_in), True
        except TransportError as error:
            return self._outcome_unknown(record, error), False
        record = store.set_native_id(record.id, native_id, f"submitted as {native_id}")
        event(
            log,
            events.SUBMISSION_SENT,
            f"job {record.id} submitted to {record.resource_id} as {native_id}",
            **job_fields(record),
            native_id=native_id,
        )
        if record.desired == "canceled":  # a cancel came while the job was being sent
            try:
                return self._send_cancel(record), False
            except GatewayError as error:
                log.warning(
                    "cancel of %s, just submitted, left for the reconcile: %s", record.id, error
                )
        return record, False

    def _not_sent(
        self, record: JobRecord, error: GatewayError, retry_in: float | None
    ) -> JobRecord:
        """Nothing reached the scheduler: the job stays `new`, accepted, and is tried again
        (by the submitter after `retry_in` seconds, or by the next reconcile)."""
        when = f"in {retry_in:g} s" if retry_in is not None else "at the next reconcile"
        event(
            log,
            events.SUBMISSION_RETRY,
            f"job {record.id} not sent to {record.resource_id}, trying again {when}: {error}",
            level=logging.WARNING,
            **job_fields(record),
            retry_in=retry_in,
            error=str(error),
        )
        return self.context.store.transition(
            record.id, JobState.NEW, f"waiting for the scheduler, trying again {when}: {error}"
        )

    def _outcome_unknown(self, record: JobRecord, error: GatewayError) -> JobRecord:
        """The scheduler may or may not have the job: it stays `new` for the reconcile."""
        event(
            log,
            events.SUBMISSION_UNKNOWN,
            f"job {record.id}: outcome of its submission to {record.resource_id} unknown, "
            f"left to the reconcile: {error}",
            level=logging.WARNING,
            **job_fields(record),
            error=str(error),
        )
        return self.context.store.transition(
            record.id,
            JobState.NEW,
            f"submission outcome unknown, will check by its tag: {error}",
            unclaim=True,
        )


def _failed(record: JobRecord, error: GatewayError) -> None:
    """The `submission.failed` line: the scheduler (or the image staging) refused the job."""
    event(
        log,
        events.SUBMISSION_FAILED,
        f"job {record.id} refused by {record.resource_id}: {error}",
        level=logging.WARNING,
        **job_fields(record),
        error=str(error),
    )
